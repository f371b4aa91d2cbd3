//! Where the container is and who asks: the account, its endpoint and its credentials, taken from
//! `storage.storage_options` first, then from the `AZURE_STORAGE_*` environment variables (the
//! Azure CLI's names, and s3dlio's), and how each request is signed with the account's key
//! (SharedKey) or carries a SAS token. A value a user wrote that cannot work is a usage error
//! naming it.

use std::io;

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::config::{Config, ObjectStoreOptions};
use crate::error::{Error, Result};
use crate::storage::http::{self, Limits, Response, Service};

/// The REST API version every request names (`x-ms-version`): Put Blob up to 5,000 MiB and
/// blocks up to 4,000 MiB, an empty `Content-Length` signed for a request without a body.
pub const API_VERSION: &str = "2021-12-02";

/// Azure's largest block (Put Block): `part_size` above it is refused.
const MAX_BLOCK: u64 = 4000 << 20;

/// What a connection to one container needs.
pub struct Settings {
    pub account: String,
    pub container: String,
    /// The account's URL, ending in `/`: `https://account.blob.core.windows.net/`, or for an
    /// endpoint that serves accounts by path (Azurite) `http://127.0.0.1:10000/account/`.
    pub endpoint: url::Url,
    pub auth: Auth,
    pub limits: Limits,
    pub part_size: usize,
}

/// How requests prove who asks.
pub enum Auth {
    /// SharedKey: each request signed with the account's key (decoded from base64).
    SharedKey(Vec<u8>),
    /// A shared access signature: its query parameters added to every URL.
    Sas(String),
    /// Nothing: a container open to anonymous reads.
    Anonymous,
}

/// The account (if the folder names one), container and key prefix of a configured folder:
/// `az://account/container/path` (s3dlio's form), or a path below the container
/// `storage.storage_root`.
pub fn container_and_prefix(
    config: &Config,
    folder: &str,
) -> Result<(Option<String>, String, String)> {
    let (account, container, path) = match folder.strip_prefix("az://") {
        Some(rest) => {
            let mut parts = rest.splitn(3, '/');
            let account = parts.next().unwrap_or("");
            let container = parts.next().unwrap_or("");
            if account.is_empty() || container.is_empty() {
                return Err(Error::usage(format!(
                    "the folder '{folder}' must be az://ACCOUNT/CONTAINER[/PATH] (s3dlio's form)"
                )));
            }
            (
                Some(account.to_string()),
                container.to_string(),
                parts.next().unwrap_or(""),
            )
        }
        None if folder.contains("://") => {
            return Err(Error::usage(format!(
                "the folder '{folder}' is not an Azure Blob address: with storage_type = azure a \
                 folder is a path below the container (storage.storage_root) or \
                 az://ACCOUNT/CONTAINER/PATH"
            )))
        }
        None => {
            let root = config.storage.storage_root.trim_end_matches('/');
            if root.is_empty() || root == "." {
                return Err(Error::usage(
                    "workload.storage.storage_root must name the container with \
                     storage_type = azure (e.g. ++workload.storage.storage_root=my-container)",
                ));
            }
            (None, root.to_string(), folder)
        }
    };
    if !valid_container_name(&container) {
        return Err(Error::usage(format!(
            "'{container}' is not a container name (3 to 63 characters of a-z, 0-9 and '-', \
             starting with a letter or digit, no '--'); it comes from {}",
            if folder.starts_with("az://") {
                format!("the folder '{folder}'")
            } else {
                "workload.storage.storage_root".to_string()
            }
        )));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(Error::usage(format!(
            "the folder '{folder}' has '..': blob names have no parent folder"
        )));
    }
    // As S3's keys: taken as written, but for a leading `./` and the closing `/`.
    let mut path = path.trim_start_matches('/');
    while let Some(rest) = path.strip_prefix("./") {
        path = rest.trim_start_matches('/');
    }
    let prefix = match path.trim_end_matches('/') {
        "" | "." => String::new(),
        path => format!("{path}/"),
    };
    Ok((account, container, prefix))
}

fn valid_container_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

impl Settings {
    /// The settings of `container` (in `account`, if the folder named it) from the
    /// configuration's options and the environment.
    pub fn resolve(
        options: &ObjectStoreOptions,
        account: Option<String>,
        container: String,
    ) -> Result<Settings> {
        Self::resolve_with(options, account, container, &|name| {
            std::env::var(name).ok().filter(|v| !v.is_empty())
        })
    }

    fn resolve_with(
        options: &ObjectStoreOptions,
        account: Option<String>,
        container: String,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings> {
        let pick = |option: &Option<String>, vars: &[&str]| {
            option.clone().or_else(|| vars.iter().find_map(|v| env(v)))
        };
        let account = account
            .or_else(|| {
                pick(
                    &options.account_name,
                    &["AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"],
                )
            })
            .ok_or_else(|| {
                Error::usage(
                    "storage_type = azure needs the storage account: set \
                     workload.storage.storage_options.account_name, or \
                     AZURE_STORAGE_ACCOUNT_NAME (or AZURE_STORAGE_ACCOUNT), or name it in the \
                     folder (az://ACCOUNT/CONTAINER/PATH)",
                )
            })?;
        if account.is_empty()
            || !account
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(Error::usage(format!(
                "'{account}' is not a storage account name (lower-case letters and digits)"
            )));
        }
        let endpoint = endpoint(
            &account,
            pick(
                &options.endpoint_url,
                &["AZURE_STORAGE_ENDPOINT", "AZURE_BLOB_ENDPOINT_URL"],
            ),
        )?;
        let auth = if let Some(key) = pick(
            &options.account_key,
            &["AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY"],
        ) {
            let key = base64::engine::general_purpose::STANDARD
                .decode(key.trim())
                .map_err(|e| {
                    Error::usage(format!(
                        "the Azure account key (workload.storage.storage_options.account_key or \
                         AZURE_STORAGE_ACCOUNT_KEY / AZURE_STORAGE_KEY) is not base64: {e}"
                    ))
                })?;
            Auth::SharedKey(key)
        } else if let Some(sas) = pick(&options.sas_token, &["AZURE_STORAGE_SAS_TOKEN"]) {
            Auth::Sas(sas.trim_start_matches('?').to_string())
        } else {
            Auth::Anonymous
        };
        if options.part_size > MAX_BLOCK {
            return Err(Error::usage(format!(
                "workload.storage.storage_options.part_size = {}: Azure's blocks are at most \
                 {MAX_BLOCK} bytes (4000 MiB)",
                options.part_size
            )));
        }
        Ok(Settings {
            account,
            container,
            endpoint,
            auth,
            limits: Limits::of(
                options,
                options.ca_bundle.as_deref(),
                "workload.storage.storage_options.ca_bundle",
            )?,
            part_size: options.part_size as usize,
        })
    }
}

/// The account's URL: Azure's for the account, or `endpoint`. An endpoint whose host is not the
/// account's own (`account.…`) serves accounts by path, as Azurite does and as s3dlio addresses
/// `AZURE_STORAGE_ENDPOINT`: the account is added to its path.
fn endpoint(account: &str, endpoint: Option<String>) -> Result<url::Url> {
    let Some(endpoint) = endpoint else {
        return Ok(format!("https://{account}.blob.core.windows.net/")
            .parse()
            .expect("a valid URL"));
    };
    let refuse = |why: String| {
        Error::usage(format!(
            "workload.storage.storage_options.endpoint_url (or AZURE_STORAGE_ENDPOINT) = \
             '{endpoint}': {why}; e.g. http://127.0.0.1:10000"
        ))
    };
    let mut url: url::Url = endpoint
        .parse()
        .map_err(|e| refuse(format!("not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(refuse("not http:// or https:// with a host".to_string()));
    }
    let own_host = url
        .host_str()
        .is_some_and(|h| h.starts_with(&format!("{account}.")));
    let mut path = url.path().trim_end_matches('/').to_string();
    if !own_host && !path.ends_with(&format!("/{account}")) {
        path = format!("{path}/{account}");
    }
    url.set_path(&format!("{path}/"));
    url.set_query(None);
    Ok(url)
}

/// Signs requests for one account ([`Service`] of the REST client).
pub struct Signer {
    pub account: String,
    /// The key, for SharedKey; `None`: nothing to sign (a SAS token in the URL, or anonymous).
    pub key: Option<Vec<u8>>,
}

impl Service for Signer {
    /// `x-ms-date` and `x-ms-version` on every request; with a key, `Authorization: SharedKey
    /// account:signature`, the HMAC-SHA256 of the request's canonical form (Azure's "Authorize
    /// with Shared Key", Blob service, version 2009-09-19 and later).
    fn authorize(
        &self,
        method: &str,
        url: &url::Url,
        headers: &mut Vec<(&'static str, String)>,
        body_len: usize,
    ) -> io::Result<()> {
        headers.push(("x-ms-date", http_date(std::time::SystemTime::now())));
        headers.push(("x-ms-version", API_VERSION.to_string()));
        let Some(key) = &self.key else {
            return Ok(());
        };
        let text = string_to_sign(&self.account, method, url, headers, body_len);
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
            .map_err(|e| io::Error::other(format!("the account key: {e}")))?;
        mac.update(text.as_bytes());
        let signature =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        headers.push((
            "authorization",
            format!("SharedKey {}:{signature}", self.account),
        ));
        Ok(())
    }

    /// Azure names the error in `x-ms-error-code` (bodiless answers too) and in its XML body's
    /// `<Code>`; the message's first line is kept (the rest is a request id and a time).
    fn error_of(&self, response: &Response, body: &str) -> (Option<String>, String) {
        let code = response
            .header("x-ms-error-code")
            .map(str::to_string)
            .or_else(|| http::xml_field(body, "Code").map(str::to_string));
        let message = http::xml_field(body, "Message")
            .and_then(|m| m.lines().next())
            .map(http::xml_unescape)
            .unwrap_or_default();
        (code, message)
    }
}

/// The canonical form of a request that SharedKey signs: the verb, the standard headers in their
/// fixed order (an empty `Content-Length` for no body), the `x-ms-` headers sorted, then the
/// resource: `/account/path` and the query parameters, sorted, one per line.
fn string_to_sign(
    account: &str,
    method: &str,
    url: &url::Url,
    headers: &[(&'static str, String)],
    body_len: usize,
) -> String {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map_or("", |(_, v)| v.as_str())
    };
    let length = if body_len == 0 {
        String::new()
    } else {
        body_len.to_string()
    };
    let mut text = format!(
        "{method}\n{}\n{}\n{length}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
        header("content-encoding"),
        header("content-language"),
        header("content-md5"),
        header("content-type"),
        header("date"),
        header("if-modified-since"),
        header("if-match"),
        header("if-none-match"),
        header("if-unmodified-since"),
        header("range"),
    );
    let mut ms: Vec<(String, &str)> = headers
        .iter()
        .filter(|(n, _)| n.to_ascii_lowercase().starts_with("x-ms-"))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim()))
        .collect();
    ms.sort();
    for (name, value) in ms {
        text.push_str(&format!("{name}:{value}\n"));
    }
    text.push_str(&format!("/{account}{}", url.path()));
    let mut query: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.into_owned()))
        .collect();
    query.sort();
    let mut names: Vec<&str> = query.iter().map(|(k, _)| k.as_str()).collect();
    names.dedup();
    for name in names {
        let values: Vec<&str> = query
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect();
        text.push_str(&format!("\n{name}:{}", values.join(",")));
    }
    text
}

/// A time as HTTP writes it (RFC 1123, GMT): `Fri, 27 Nov 2026 01:37:12 GMT`.
fn http_date(time: std::time::SystemTime) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let seconds = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: gmtime_r writes only into the tm we pass; both pointers are valid for the call.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::gmtime_r(&seconds, &mut tm);
        tm
    };
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[tm.tm_wday as usize % 7],
        tm.tm_mday,
        MONTHS[tm.tm_mon as usize % 12],
        tm.tm_year + 1900,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::resolve;

    #[test]
    fn containers_and_prefixes_come_from_the_folder_or_the_root() {
        let mut config = resolve(&[
            "workload=default",
            "++workload.storage.storage_type=azure",
            "++workload.storage.storage_root=train-data",
        ])
        .unwrap();
        assert_eq!(
            container_and_prefix(&config, "./data/unet3d/").unwrap(),
            (None, "train-data".to_string(), "data/unet3d/".to_string())
        );
        assert_eq!(
            container_and_prefix(&config, "az://acct/other/x/y/").unwrap(),
            (
                Some("acct".to_string()),
                "other".to_string(),
                "x/y/".to_string()
            )
        );
        assert_eq!(
            container_and_prefix(&config, "az://acct/other").unwrap(),
            (Some("acct".to_string()), "other".to_string(), String::new())
        );
        for (folder, says) in [
            ("az://acct", "az://ACCOUNT/CONTAINER"),
            ("s3://bucket/x", "not an Azure Blob address"),
            (
                "az://acct/Bad--Name/x",
                "'Bad--Name' is not a container name",
            ),
            ("a/../b", "'..'"),
        ] {
            let error = container_and_prefix(&config, folder).unwrap_err();
            assert_eq!(error.exit_code(), 2);
            assert!(error.to_string().contains(says), "{folder}: {error}");
        }
        config.storage.storage_root = ".".to_string();
        let none = container_and_prefix(&config, "data").unwrap_err();
        assert!(
            none.to_string().contains("must name the container"),
            "{none}"
        );
    }

    #[test]
    fn accounts_endpoints_and_credentials_come_from_options_then_the_environment() {
        let env = |name: &str| match name {
            "AZURE_STORAGE_ACCOUNT" => Some("fromenv".to_string()),
            "AZURE_STORAGE_KEY" => Some("a2V5".to_string()),
            "AZURE_STORAGE_ENDPOINT" => Some("http://127.0.0.1:10000".to_string()),
            _ => None,
        };
        let options = ObjectStoreOptions::default();
        let settings = Settings::resolve_with(&options, None, "c1c".into(), &env).unwrap();
        assert_eq!(settings.account, "fromenv");
        assert_eq!(
            settings.endpoint.as_str(),
            "http://127.0.0.1:10000/fromenv/"
        );
        assert!(matches!(&settings.auth, Auth::SharedKey(k) if k == b"key"));
        // The folder's account wins; the options win over the environment.
        let options = ObjectStoreOptions {
            account_name: Some("opt".into()),
            endpoint_url: Some("https://uri.blob.core.windows.net".into()),
            sas_token: Some("?sv=1&sig=x".into()),
            ..ObjectStoreOptions::default()
        };
        let no_env = |_: &str| None;
        let settings =
            Settings::resolve_with(&options, Some("uri".into()), "c1c".into(), &no_env).unwrap();
        assert_eq!(settings.account, "uri");
        assert_eq!(
            settings.endpoint.as_str(),
            "https://uri.blob.core.windows.net/"
        );
        assert!(matches!(&settings.auth, Auth::Sas(s) if s == "sv=1&sig=x"));
        let settings = Settings::resolve_with(
            &ObjectStoreOptions::default(),
            Some("acct".into()),
            "c1c".into(),
            &no_env,
        )
        .unwrap();
        assert_eq!(
            settings.endpoint.as_str(),
            "https://acct.blob.core.windows.net/"
        );
        assert!(matches!(settings.auth, Auth::Anonymous));
        for (options, says) in [
            (ObjectStoreOptions::default(), "needs the storage account"),
            (
                ObjectStoreOptions {
                    account_name: Some("a".into()),
                    account_key: Some("not base64!".into()),
                    ..ObjectStoreOptions::default()
                },
                "is not base64",
            ),
            (
                ObjectStoreOptions {
                    account_name: Some("a".into()),
                    endpoint_url: Some("ftp://host".into()),
                    ..ObjectStoreOptions::default()
                },
                "not http:// or https://",
            ),
            (
                ObjectStoreOptions {
                    account_name: Some("a".into()),
                    part_size: 5 << 30,
                    ..ObjectStoreOptions::default()
                },
                "at most",
            ),
        ] {
            let error = Settings::resolve_with(&options, None, "c1c".into(), &no_env)
                .err()
                .unwrap();
            assert!(error.to_string().contains(says), "{error}");
        }
    }

    /// A Put Block request's canonical form, by Azure's rules.
    #[test]
    fn the_canonical_form_follows_azure_s_rules() {
        let url: url::Url = "http://127.0.0.1:1/acct/c/b%20x?comp=block&blockid=QQ%3D%3D"
            .parse()
            .unwrap();
        let headers = vec![
            ("x-ms-version", API_VERSION.to_string()),
            ("content-type", "application/octet-stream".to_string()),
            ("X-MS-date", "Fri, 27 Nov 2026 01:37:12 GMT".to_string()),
            ("if-match", "\"0x1\"".to_string()),
        ];
        assert_eq!(
            string_to_sign("acct", "PUT", &url, &headers, 5),
            "PUT\n\n\n5\n\napplication/octet-stream\n\n\n\"0x1\"\n\n\n\n\
             x-ms-date:Fri, 27 Nov 2026 01:37:12 GMT\nx-ms-version:2021-12-02\n\
             /acct/acct/c/b%20x\nblockid:QQ==\ncomp:block"
        );
        assert_eq!(
            http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_743_432)),
            "Fri, 27 Nov 2026 01:37:12 GMT"
        );
    }
}
