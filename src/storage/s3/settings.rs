//! Where the bucket is and who asks: the endpoint, region, credentials and URL style, taken from
//! `storage.storage_options` first, then from the standard `AWS_*` environment variables, then
//! from the AWS profile files (`~/.aws/credentials`, `~/.aws/config`), as the AWS tools and
//! DLIO's S3 clients take them. A value a user wrote that cannot work is a usage error naming it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusty_s3::{Bucket, Credentials, UrlStyle};

use crate::config::{Config, EndpointSpread, ObjectStoreOptions, StorageType, VerifyWrites};
use crate::error::{Error, Result};
use crate::storage::http::Limits;

/// What a connection to one bucket needs.
#[derive(Debug)]
pub struct Settings {
    /// The bucket at each endpoint of the store, in the order configured (one or more), with
    /// the endpoint's URL as written.
    pub buckets: Vec<(String, Bucket)>,
    /// `None`: requests go unsigned (a public bucket).
    pub credentials: Option<Credentials>,
    /// Attempts, requests in flight, timeout, certificate authorities.
    pub limits: Limits,
    pub part_size: usize,
    pub parts_in_flight: usize,
    pub verify_writes: VerifyWrites,
    pub endpoint_spread: EndpointSpread,
}

/// The bucket and the key prefix of a configured folder: `s3://bucket/prefix` (DLIO's
/// `data_folder: s3://bucket`), or a path below the bucket `storage.storage_root`.
pub fn bucket_and_prefix(config: &Config, folder: &str) -> Result<(String, String)> {
    // `ais://` is how DLIO's AIStore storage writes the bucket (it takes `s3://` too).
    let store = config.storage.storage_type;
    let schemes: &[&str] = match store {
        StorageType::Aistore => &["s3://", "ais://"],
        _ => &["s3://"],
    };
    let scheme = schemes.iter().find(|s| folder.starts_with(**s));
    let (bucket, path) = match scheme.and_then(|s| folder.strip_prefix(s)) {
        Some(rest) => {
            let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
            (bucket.to_string(), path)
        }
        None => {
            let root = config.storage.storage_root.trim_end_matches('/');
            if root.is_empty() || root == "." {
                return Err(Error::usage(format!(
                    "workload.storage.storage_root must name the bucket with \
                     storage_type = {store} (e.g. ++workload.storage.storage_root=my-bucket)"
                )));
            }
            (root.to_string(), folder)
        }
    };
    if !valid_bucket_name(&bucket) {
        return Err(Error::usage(format!(
            "'{bucket}' is not a bucket name (3 to 63 characters of a-z, 0-9, '.', '-', '_'); \
             it comes from {}",
            if scheme.is_some() {
                format!("the folder '{folder}'")
            } else {
                "workload.storage.storage_root".to_string()
            }
        )));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(Error::usage(format!(
            "the folder '{folder}' has '..': object keys have no parent folder"
        )));
    }
    // Keys are taken as written (S3 keeps `a//b` and `a/./b` apart from `a/b`; DLIO's own S3
    // storage puts whole URIs in its keys), but for a leading `./` and the closing `/`.
    let mut path = path.trim_start_matches('/');
    while let Some(rest) = path.strip_prefix("./") {
        path = rest.trim_start_matches('/');
    }
    let path = path.trim_end_matches('/');
    let prefix = match path {
        "" | "." => String::new(),
        path => format!("{path}/"),
    };
    Ok((bucket, prefix))
}

fn valid_bucket_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b))
}

impl Settings {
    /// The settings of `bucket` from the configuration's options, the environment and the
    /// profile files; with `aistore`, of AIStore's S3 API (see [`aistore_s3_api`]).
    pub fn resolve(options: &ObjectStoreOptions, bucket: &str, aistore: bool) -> Result<Settings> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let profile_name = options
            .profile
            .clone()
            .or_else(|| env("AWS_PROFILE"))
            .unwrap_or_else(|| "default".to_string());
        let profile = Profile::read(&profile_name)?;
        let pick = |option: &Option<String>, vars: &[&str], profile_key: &str| {
            option
                .clone()
                .or_else(|| vars.iter().find_map(|v| env(v)))
                .or_else(|| profile.get(profile_key))
        };
        let region = pick(
            &options.region,
            &["AWS_REGION", "AWS_DEFAULT_REGION"],
            "region",
        )
        .unwrap_or_else(|| "us-east-1".to_string());
        // Several endpoints of one store: the option's list, else `S3_ENDPOINT_URIS`, which
        // replaces `endpoint_url` as it does in DLIO's fork that mlpstorage v3 runs.
        let several = match (&options.endpoint_urls[..], env("S3_ENDPOINT_URIS")) {
            ([], None) => None,
            ([], Some(uris)) => Some((
                "S3_ENDPOINT_URIS",
                uris.split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            )),
            (urls, _) => Some((
                "workload.storage.storage_options.endpoint_urls",
                urls.to_vec(),
            )),
        };
        let endpoints = match several {
            Some((source, urls)) if !urls.is_empty() => {
                urls.into_iter().map(|u| (source, u)).collect::<Vec<_>>()
            }
            // AIStore's gateway as DLIO's AIStore storage finds it: the option, else the
            // AIStore tools' variable, else DLIO's default.
            _ if aistore => vec![(
                "workload.storage.storage_options.endpoint_url",
                options
                    .endpoint_url
                    .clone()
                    .or_else(|| env("AIS_ENDPOINT"))
                    .unwrap_or_else(|| "http://localhost:8080".to_string()),
            )],
            _ => vec![(
                "workload.storage.storage_options.endpoint_url",
                pick(
                    &options.endpoint_url,
                    &["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"],
                    "endpoint_url",
                )
                .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com")),
            )],
        };
        let mut buckets = Vec::with_capacity(endpoints.len());
        for (source, endpoint) in endpoints {
            let endpoint = if aistore {
                aistore_s3_api(&endpoint)
            } else {
                endpoint
            };
            let bucket_url = address(&endpoint, source, bucket, &region, options)?;
            buckets.push((endpoint.trim_end_matches('/').to_string(), bucket_url));
        }
        let ca_bundle = pick(&options.ca_bundle, &["AWS_CA_BUNDLE"], "ca_bundle");
        Ok(Settings {
            buckets,
            credentials: credentials(options, &env, &profile)?,
            limits: Limits::of(
                options,
                ca_bundle.as_deref(),
                "workload.storage.storage_options.ca_bundle or AWS_CA_BUNDLE",
            )?,
            part_size: options.part_size as usize,
            parts_in_flight: (options.parts_in_flight as usize).max(1),
            verify_writes: options.verify_writes,
            endpoint_spread: options.endpoint_spread,
        })
    }
}

/// AIStore's S3 API at the gateway `endpoint`: below `/s3` (AIStore's default) where the URL
/// names no path; a URL with a path is taken as written (a cluster with the `S3-API-via-Root`
/// feature is written with a closing `/`).
pub fn aistore_s3_api(endpoint: &str) -> String {
    match endpoint.parse::<url::Url>() {
        Ok(url) if url.path() == "/" && !endpoint.ends_with('/') => {
            format!("{}s3", url.as_str())
        }
        _ => endpoint.to_string(),
    }
}

/// `bucket` at the endpoint `endpoint` (named by `source` in messages), in the URL style the
/// endpoint takes.
fn address(
    endpoint: &str,
    source: &str,
    bucket: &str,
    region: &str,
    options: &ObjectStoreOptions,
) -> Result<Bucket> {
    let endpoint_url: url::Url = endpoint.parse().map_err(|e| {
        Error::usage(format!(
            "{source} = '{endpoint}': not a URL ({e}); e.g. http://127.0.0.1:9000"
        ))
    })?;
    // AWS serves buckets as host names; other S3 servers (MinIO, Ceph, SeaweedFS, appliances)
    // answer on one host, with the bucket in the path, unless set up otherwise (as the AWS
    // SDKs and boto3 address a custom endpoint).
    let aws = match endpoint_url.host() {
        Some(url::Host::Domain(d)) => d.ends_with(".amazonaws.com"),
        _ => false,
    };
    let path_style = options
        .force_path_style
        .unwrap_or(!aws || bucket.contains('.'));
    let style = if path_style {
        UrlStyle::Path
    } else {
        UrlStyle::VirtualHost
    };
    Bucket::new(endpoint_url, style, bucket.to_string(), region.to_string()).map_err(|e| {
        Error::usage(format!(
            "cannot address bucket '{bucket}' at '{endpoint}' ({e:?}); the endpoint must be \
                 http:// or https:// with a host, and virtual-host style \
                 (s3_force_path_style = False) needs a host name, not an address"
        ))
    })
}

/// The access key and secret: both from the options, or both from the environment, or both from
/// the profile; one without the other is a usage error.
fn credentials(
    options: &ObjectStoreOptions,
    env: &dyn Fn(&str) -> Option<String>,
    profile: &Profile,
) -> Result<Option<Credentials>> {
    let sources = [
        (
            "workload.storage.storage_options.access_key_id / secret_access_key",
            options.access_key_id.clone(),
            options.secret_access_key.clone(),
            options.session_token.clone(),
        ),
        (
            "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY",
            env("AWS_ACCESS_KEY_ID"),
            env("AWS_SECRET_ACCESS_KEY"),
            env("AWS_SESSION_TOKEN"),
        ),
        (
            "aws_access_key_id / aws_secret_access_key of the AWS profile",
            profile.get("aws_access_key_id"),
            profile.get("aws_secret_access_key"),
            profile.get("aws_session_token"),
        ),
    ];
    for (names, key, secret, token) in sources {
        match (key, secret) {
            (None, None) => continue,
            (Some(key), Some(secret)) => {
                return Ok(Some(match token {
                    Some(token) => Credentials::new_with_token(key, secret, token),
                    None => Credentials::new(key, secret),
                }))
            }
            _ => {
                return Err(Error::usage(format!(
                    "S3 credentials need both the access key and the secret: only one of \
                     {names} is set"
                )))
            }
        }
    }
    Ok(None)
}

/// One profile's keys from the AWS files: the credentials file's `[name]` section, then the
/// config file's `[profile name]` (`[default]`). Their format is a few lines of INI, read here
/// rather than through a crate: only sections and `key = value` lines matter.
#[derive(Debug, Default)]
struct Profile {
    values: HashMap<String, String>,
}

impl Profile {
    fn read(name: &str) -> Result<Profile> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let file = |var: &str, default: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(default)))
        };
        let mut profile = Profile::default();
        let config_section = if name == "default" {
            "default".to_string()
        } else {
            format!("profile {name}")
        };
        for (path, section) in [
            (
                file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"),
                name.to_string(),
            ),
            (file("AWS_CONFIG_FILE", ".aws/config"), config_section),
        ] {
            let Some(path) = path else { continue };
            profile.take_section(&path, &section)?;
        }
        Ok(profile)
    }

    /// Adds the keys of `[section]` in the file at `path` that are not set yet; a missing file
    /// has none.
    fn take_section(&mut self, path: &Path, section: &str) -> Result<()> {
        let text = match crate::folder::read_text_file(path, 1 << 20) {
            Ok(Some(text)) => text,
            Ok(None) => return Ok(()),
            Err(e) => {
                return Err(Error::on_object(
                    "cannot read AWS profile file",
                    path.display().to_string(),
                    e,
                ))
            }
        };
        let mut inside = false;
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with(['#', ';']) {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                inside = name.trim() == section;
            } else if let (true, Some((key, value))) = (inside, line.split_once('=')) {
                self.values
                    .entry(key.trim().to_ascii_lowercase())
                    .or_insert_with(|| value.trim().to_string());
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<String> {
        self.values.get(key).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_and_prefixes_come_from_the_folder_or_the_root() {
        let mut config = crate::config::tests::resolve(&[
            "workload=default",
            "++workload.storage.storage_type=s3",
            "++workload.storage.storage_root=train-bucket",
        ])
        .unwrap();
        assert_eq!(
            bucket_and_prefix(&config, "./data/unet3d/").unwrap(),
            ("train-bucket".to_string(), "data/unet3d/".to_string())
        );
        assert_eq!(
            bucket_and_prefix(&config, "s3://other/x//y/").unwrap(),
            ("other".to_string(), "x//y/".to_string())
        );
        // Where DLIO's s3torchconnector storage puts a dataset: keys that start with the URI.
        assert_eq!(
            bucket_and_prefix(&config, "s3://b-1/s3://b-1").unwrap(),
            ("b-1".to_string(), "s3://b-1/".to_string())
        );
        assert_eq!(
            bucket_and_prefix(&config, ".").unwrap(),
            ("train-bucket".to_string(), String::new())
        );
        assert_eq!(
            bucket_and_prefix(&config, "s3://other").unwrap(),
            ("other".to_string(), String::new())
        );
        let up = bucket_and_prefix(&config, "a/../b")
            .unwrap_err()
            .to_string();
        assert!(up.contains("'..'"), "{up}");
        let bad = bucket_and_prefix(&config, "s3://Bad_Name!").unwrap_err();
        assert!(bad.to_string().contains("'Bad_Name!'"), "{bad}");
        config.storage.storage_root = "./".to_string();
        let none = bucket_and_prefix(&config, "data").unwrap_err().to_string();
        assert!(none.contains("storage_root must name the bucket"), "{none}");
    }

    #[test]
    fn aws_gets_virtual_hosts_and_other_endpoints_paths() {
        let url = |endpoint: &str, bucket: &str, force: Option<bool>| {
            let options = ObjectStoreOptions {
                endpoint_url: Some(endpoint.to_string()),
                region: Some("eu-west-3".to_string()),
                force_path_style: force,
                ..ObjectStoreOptions::default()
            };
            let settings = Settings::resolve(&options, bucket, false).unwrap();
            settings.buckets[0].1.base_url().to_string()
        };
        let aws = "https://s3.eu-west-3.amazonaws.com";
        assert_eq!(
            url(aws, "data", None),
            "https://data.s3.eu-west-3.amazonaws.com/"
        );
        assert_eq!(
            url(aws, "data.v2", None),
            "https://s3.eu-west-3.amazonaws.com/data.v2/"
        );
        assert_eq!(
            url(aws, "data", Some(true)),
            "https://s3.eu-west-3.amazonaws.com/data/"
        );
        assert_eq!(
            url("http://minio.lab:9000", "data", None),
            "http://minio.lab:9000/data/"
        );
        assert_eq!(
            url("http://minio.lab:9000", "data", Some(false)),
            "http://data.minio.lab:9000/"
        );
        let address = Settings::resolve(
            &ObjectStoreOptions {
                endpoint_url: Some("http://10.0.0.5:9000".to_string()),
                force_path_style: Some(false),
                ..ObjectStoreOptions::default()
            },
            "data",
            false,
        )
        .unwrap_err();
        assert!(
            address.to_string().contains("needs a host name"),
            "{address}"
        );
    }

    /// AIStore's S3 API is below `/s3` of a gateway (a URL with a path is taken as written),
    /// its bucket written `ais://` or `s3://` as DLIO's AIStore storage takes them.
    #[test]
    fn aistore_is_asked_through_its_s3_api() {
        assert_eq!(aistore_s3_api("http://gw:51080"), "http://gw:51080/s3");
        assert_eq!(aistore_s3_api("http://gw:51080/s3"), "http://gw:51080/s3");
        assert_eq!(aistore_s3_api("http://gw:51080/"), "http://gw:51080/");
        let settings = |url: Option<&str>| {
            let options = ObjectStoreOptions {
                endpoint_url: url.map(str::to_string),
                ..ObjectStoreOptions::default()
            };
            let settings = Settings::resolve(&options, "data", true).unwrap();
            settings.buckets[0].1.base_url().to_string()
        };
        assert_eq!(
            settings(Some("http://gw:51080")),
            "http://gw:51080/s3/data/"
        );
        if std::env::var_os("AIS_ENDPOINT").is_none() {
            assert_eq!(settings(None), "http://localhost:8080/s3/data/");
        }
        let config = crate::config::tests::resolve(&[
            "workload=default",
            "++workload.storage.storage_type=aistore",
        ])
        .unwrap();
        for folder in ["ais://ml-data/train/", "s3://ml-data/train"] {
            assert_eq!(
                bucket_and_prefix(&config, folder).unwrap(),
                ("ml-data".to_string(), "train/".to_string())
            );
        }
        let s3 = crate::config::tests::resolve(&["workload=default"]).unwrap();
        let mut s3 = s3;
        s3.storage.storage_root = "root-bucket".to_string();
        assert_eq!(
            bucket_and_prefix(&s3, "ais://ml-data/train").unwrap().0,
            "root-bucket",
            "ais:// is a path below the bucket for s3"
        );
    }

    #[test]
    fn a_profile_section_is_read_and_earlier_files_win() {
        let dir = crate::storage::scratch_dir("aws-profile");
        std::fs::create_dir_all(&dir).unwrap();
        let credentials = dir.join("credentials");
        std::fs::write(
            &credentials,
            "[default]\naws_access_key_id = A\n\n[bench]\n# a comment\naws_access_key_id=B\n\
             aws_secret_access_key = S = T\n",
        )
        .unwrap();
        let config = dir.join("config");
        std::fs::write(
            &config,
            "[profile bench]\nregion = eu-west-3\naws_access_key_id = C\n",
        )
        .unwrap();
        let mut profile = Profile::default();
        profile.take_section(&credentials, "bench").unwrap();
        profile.take_section(&config, "profile bench").unwrap();
        profile.take_section(&dir.join("absent"), "bench").unwrap();
        assert_eq!(profile.get("aws_access_key_id").as_deref(), Some("B"));
        assert_eq!(
            profile.get("aws_secret_access_key").as_deref(),
            Some("S = T")
        );
        assert_eq!(profile.get("region").as_deref(), Some("eu-west-3"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn credentials_come_in_pairs_and_options_win() {
        let no_env = |_: &str| None;
        let mut options = ObjectStoreOptions {
            access_key_id: Some("K".into()),
            ..ObjectStoreOptions::default()
        };
        let half = credentials(&options, &no_env, &Profile::default()).unwrap_err();
        assert!(half.to_string().contains("only one of"), "{half}");
        options.secret_access_key = Some("S".into());
        let env = |name: &str| (name == "AWS_ACCESS_KEY_ID").then(|| "E".to_string());
        let picked = credentials(&options, &env, &Profile::default())
            .unwrap()
            .unwrap();
        assert_eq!((picked.key(), picked.secret()), ("K", "S"));
        let anonymous = credentials(&ObjectStoreOptions::default(), &no_env, &Profile::default());
        assert!(anonymous.unwrap().is_none());
    }
}
