//! The workloads shipped inside the binary (`workload=NAME`), one YAML file each in `workloads/`.

macro_rules! shipped {
    ($($name:literal),+ $(,)?) => {
        /// (name, YAML text) of every shipped workload, sorted by name.
        pub const SHIPPED: &[(&str, &str)] = &[$(($name, include_str!(concat!("workloads/", $name, ".yaml")))),+];
    };
}

shipped!(
    "bert_v100",
    "cosmoflow_a100",
    "cosmoflow_datagen",
    "cosmoflow_h100",
    "cosmoflow_v100",
    "default",
    "dlrm",
    "dlrm_b200",
    "dlrm_datagen",
    "flux_b200",
    "flux_datagen",
    "llama3_1t",
    "llama3_405b",
    "llama3_70b",
    "llama3_8b",
    "megatron_deepspeed",
    "resnet50_a100",
    "resnet50_datagen",
    "resnet50_h100",
    "resnet50_v100",
    "retinanet_b200",
    "retinanet_datagen",
    "retinanet_mi355",
    "unet3d_a100",
    "unet3d_b200",
    "unet3d_datagen",
    "unet3d_h100",
    "unet3d_v100",
);

pub fn find(name: &str) -> Option<&'static str> {
    SHIPPED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

/// The first comment line of a workload file: what it emulates.
pub fn description(text: &str) -> &str {
    text.lines()
        .find_map(|line| line.strip_prefix('#'))
        .map(str::trim)
        .unwrap_or("")
}

pub fn unknown_workload_message(name: &str) -> String {
    let names: Vec<&str> = SHIPPED.iter().map(|(n, _)| *n).collect();
    format!(
        "unknown workload '{name}'{}\n  list them with 'dlio-rs workloads', or use --config-dir DIR for DIR/workload/{name}.yaml",
        super::suggest::closest_names_hint(name, &names)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::value::Value;
    use crate::config::Config;

    #[test]
    fn every_file_in_the_folder_is_shipped_and_valid() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config/workloads");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                e.unwrap()
                    .file_name()
                    .to_str()?
                    .strip_suffix(".yaml")
                    .map(str::to_string)
            })
            .collect();
        on_disk.sort();
        let shipped: Vec<String> = SHIPPED.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(on_disk, shipped);
        for (name, text) in SHIPPED {
            let tree = Value::from_yaml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let config = Config::from_tree(name, tree).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                config.unknown_keys.is_empty(),
                "{name}: unknown keys {:?}",
                config.unknown_keys
            );
            assert!(
                !description(text).is_empty(),
                "{name} has no description comment"
            );
        }
    }
}
