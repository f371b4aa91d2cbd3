//! Times in DLIO's syntax (`computation_time`, `eval_time`, `preprocess_time`): a number of
//! seconds, `{mean, stdev}`, or a distribution by `type`, read into the [`TimeSpec`] the emulated accelerator draws from. A value that cannot be
//! drawn is an error naming the key, never 0 s of compute.

use super::fields::Fields;
use super::value::Value;
use crate::compute::TimeSpec;

/// The time spec at `key`, with its old flat `<key>_stdev` form; a bad one fails the key.
pub(super) fn time_spec(f: &mut Fields, key: &str) -> TimeSpec {
    let flat_stdev = match f.raw(&format!("{key}_stdev")) {
        Some(Value::Int(i)) => Some(*i as f64),
        Some(Value::Float(x)) => Some(*x),
        _ => None,
    };
    let Some(value) = f.raw(key) else {
        return match flat_stdev {
            Some(stdev) => from_value(&Value::Float(0.0), Some(stdev)).unwrap_or(TimeSpec::ZERO),
            None => TimeSpec::ZERO,
        };
    };
    checked(f, key, value.clone(), flat_stdev)
}

/// The time spec at one of dlio-rs's own keys, which has no old flat form and, having no DLIO
/// configurations to accept, refuses a negative time rather than taking its absolute value.
pub(super) fn own_time_spec(f: &mut Fields, key: &str) -> TimeSpec {
    let Some(value) = f.raw(key).cloned() else {
        return TimeSpec::ZERO;
    };
    let spec = checked(f, key, value.clone(), None);
    if matches!(spec, TimeSpec::Fixed(seconds) if seconds < 0.0) {
        f.fail(key, &value, "expected seconds ≥ 0, or a distribution");
    }
    spec
}

fn checked(f: &mut Fields, key: &str, value: Value, flat_stdev: Option<f64>) -> TimeSpec {
    from_value(&value, flat_stdev).unwrap_or_else(|why| {
        f.fail(key, &value, &why);
        TimeSpec::ZERO
    })
}

/// Reads every form DLIO accepts: a number; `{mean}`; `{mean, stdev}`; `{type: normal|uniform|
/// gamma|exponential|poisson, ...}`. `flat_stdev` is the old `<key>_stdev` form.
pub fn from_value(value: &Value, flat_stdev: Option<f64>) -> Result<TimeSpec, String> {
    let number = |v: &Value| match v {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) if f.is_finite() => Some(*f),
        _ => None,
    };
    let spec = match value {
        Value::Null => TimeSpec::ZERO,
        // DLIO's default is `{}`: no sleep.
        Value::Map(entries) if entries.is_empty() => TimeSpec::ZERO,
        Value::Map(entries) => {
            let field = |name: &str| -> Result<Option<f64>, String> {
                match entries.iter().find(|(k, _)| k == name) {
                    None => Ok(None),
                    Some((_, v)) => number(v)
                        .map(Some)
                        .ok_or_else(|| format!("'{name}' must be a number")),
                }
            };
            let need = |name: &str| -> Result<f64, String> {
                field(name)?.ok_or_else(|| format!("this distribution needs '{name}'"))
            };
            if let Some((key, _)) = entries.iter().find(|(k, _)| {
                ![
                    "type", "mean", "stdev", "min", "max", "shape", "scale", "lam",
                ]
                .contains(&k.as_str())
            }) {
                return Err(format!(
                    "unknown field '{key}'; fields are type, mean, stdev, min, max, shape, scale, lam"
                ));
            }
            let kind = match entries.iter().find(|(k, _)| k == "type") {
                None => "normal".to_string(),
                Some((_, Value::Str(s))) => s.to_ascii_lowercase(),
                Some((_, other)) => {
                    return Err(format!("'type' must be a name, not {}", other.kind()))
                }
            };
            match kind.as_str() {
                "normal" => {
                    let mean = need("mean")?;
                    let stdev = field("stdev")?.or(flat_stdev).unwrap_or(0.0);
                    TimeSpec::normal(mean, stdev)
                }
                "uniform" => TimeSpec::Uniform {
                    min: need("min")?,
                    max: need("max")?,
                },
                "gamma" => TimeSpec::Gamma {
                    shape: need("shape")?,
                    scale: need("scale")?,
                },
                "exponential" => TimeSpec::Exponential {
                    scale: need("scale")?,
                },
                "poisson" => TimeSpec::Poisson { lam: need("lam")? },
                other => {
                    return Err(format!(
                    "unknown distribution type '{other}'; valid types are normal, uniform, gamma, \
                         exponential, poisson"
                ))
                }
            }
        }
        other => {
            match number(other) {
                Some(seconds) => TimeSpec::normal(seconds, flat_stdev.unwrap_or(0.0)),
                None => return Err(
                    "expected seconds as a number or a distribution like {mean: 0.5, stdev: 0.1}"
                        .into(),
                ),
            }
        }
    };
    spec.validate()?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> Result<TimeSpec, String> {
        from_value(&Value::from_yaml(yaml).unwrap(), None)
    }

    #[test]
    fn every_dlio_syntax() {
        assert_eq!(spec("0.5").unwrap(), TimeSpec::Fixed(0.5));
        assert_eq!(spec("{}").unwrap(), TimeSpec::ZERO);
        assert_eq!(spec("2").unwrap(), TimeSpec::Fixed(2.0));
        assert_eq!(spec("{mean: 0.5}").unwrap(), TimeSpec::Fixed(0.5));
        assert_eq!(
            spec("{mean: 0.5, stdev: 0.1}").unwrap(),
            TimeSpec::Normal {
                mean: 0.5,
                stdev: 0.1
            }
        );
        assert_eq!(
            spec("{type: uniform, min: 1, max: 2}").unwrap(),
            TimeSpec::Uniform { min: 1.0, max: 2.0 }
        );
        assert_eq!(
            spec("{type: gamma, shape: 2, scale: 0.5}").unwrap(),
            TimeSpec::Gamma {
                shape: 2.0,
                scale: 0.5
            }
        );
        assert_eq!(
            spec("{type: exponential, scale: 0.5}").unwrap(),
            TimeSpec::Exponential { scale: 0.5 }
        );
        assert_eq!(
            spec("{type: poisson, lam: 3}").unwrap(),
            TimeSpec::Poisson { lam: 3.0 }
        );
        let flat = from_value(&Value::Float(1.0), Some(0.2)).unwrap();
        assert_eq!(
            flat,
            TimeSpec::Normal {
                mean: 1.0,
                stdev: 0.2
            }
        );
        assert!(spec("{type: weibull, a: 1}").is_err());
        assert!(spec("{type: uniform, min: 2, max: 1}").is_err());
        assert!(spec("{type: gamma, shape: 2}")
            .unwrap_err()
            .contains("scale"));
        assert!(spec("fast").is_err());
        // Absurd but finite: refused, not slept, and never silently 0 s.
        for absurd in [
            "1e30",
            "-1e30",
            "{mean: 2e6}",
            "{mean: 1, stdev: 1e7}",
            "{type: poisson, lam: 1e300}",
            "{type: gamma, shape: 1e200, scale: 1e200}",
            "{type: exponential, scale: 1e9}",
            "{type: uniform, min: 0, max: 1e9}",
        ] {
            let refused = spec(absurd).unwrap_err();
            assert!(
                refused.contains("1e6") || refused.contains("stdev"),
                "{absurd}: {refused}"
            );
        }
        assert_eq!(spec("1e6").unwrap(), TimeSpec::Fixed(1e6));
    }
}
