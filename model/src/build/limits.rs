//! [`Limits`]: what one Ingress may hold, checked before anything of it is parsed.

use k8s_openapi::api::networking::v1::Ingress;

use crate::annotations::value;
use crate::snapshot::Limits;

/// The first limit `ing` exceeds, as a message naming it, its flag and the count;
/// `regex` tells whether the Ingress's paths are regular expressions
/// (`use-regex`, `rewrite-target`), read from its annotations under `prefix`.
pub(super) fn check(ing: &Ingress, limits: &Limits, prefix: &str) -> Result<(), String> {
    let annotations = ing.metadata.annotations.iter().flatten();
    let mut bytes = 0;
    for (k, v) in annotations {
        if v.len() > limits.annotation_value_bytes {
            return Err(format!(
                "annotation {k}: {} bytes, more than --max-annotation-value-bytes ({})",
                v.len(),
                limits.annotation_value_bytes
            ));
        }
        bytes += k.len() + v.len();
    }
    let regex = ["use-regex", "rewrite-target"].iter().any(|key| {
        ing.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&format!("{prefix}{key}")))
            .is_some_and(|v| *key == "rewrite-target" || value::boolean(v.trim()) == Ok(true))
    });
    let spec = ing.spec.as_ref();
    let rules = spec.and_then(|s| s.rules.as_ref()).into_iter().flatten();
    let mut hosts = 0;
    let mut paths = 0;
    for rule in rules {
        hosts += usize::from(rule.host.is_some());
        bytes += rule.host.as_deref().map_or(0, str::len);
        for p in rule.http.iter().flat_map(|h| &h.paths) {
            paths += 1;
            bytes += p.path.as_deref().map_or(0, str::len);
            bytes += p.backend.service.as_ref().map_or(0, |s| s.name.len());
        }
    }
    for t in spec.and_then(|s| s.tls.as_ref()).into_iter().flatten() {
        for h in t.hosts.iter().flatten() {
            hosts += 1;
            bytes += h.len();
        }
    }
    let over = |what: &str, flag: &str, n: usize, max: usize| {
        Err(format!("{n} {what}, more than --{flag} ({max})"))
    };
    if bytes > limits.ingress_bytes {
        return over("bytes", "max-ingress-bytes", bytes, limits.ingress_bytes);
    }
    if paths > limits.paths_per_ingress {
        return over(
            "paths",
            "max-paths-per-ingress",
            paths,
            limits.paths_per_ingress,
        );
    }
    if regex && paths > limits.regex_paths_per_ingress {
        return over(
            "regex paths",
            "max-regex-paths-per-ingress",
            paths,
            limits.regex_paths_per_ingress,
        );
    }
    if hosts > limits.hosts_per_ingress {
        return over(
            "hosts",
            "max-hosts-per-ingress",
            hosts,
            limits.hosts_per_ingress,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ingress with `n` paths of `path_bytes` each on one host, annotated.
    fn ingress(n: usize, path_bytes: usize, annotations: serde_json::Value) -> Ingress {
        let paths: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                serde_json::json!({
                    "path": format!("/{i:0width$}", width = path_bytes - 1),
                    "pathType": "Prefix",
                    "backend": { "service": { "name": "app", "port": { "number": 80 } } },
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "i", "namespace": "n", "annotations": annotations },
            "spec": { "rules": [{ "host": "a.test", "http": { "paths": paths } }] },
        }))
        .unwrap()
    }

    fn check_with(ing: &Ingress, limits: Limits) -> Result<(), String> {
        check(ing, &limits, "p/")
    }

    #[test]
    fn each_limit_names_its_flag() {
        let l = Limits {
            ingress_bytes: 1000,
            annotation_value_bytes: 100,
            paths_per_ingress: 10,
            regex_paths_per_ingress: 2,
            regex_paths_per_host: 4,
            hosts_per_ingress: 5,
        };
        let none = serde_json::json!({});
        assert_eq!(check_with(&ingress(10, 10, none.clone()), l), Ok(()));
        let err = |r: Result<(), String>| r.unwrap_err();
        assert!(
            err(check_with(&ingress(11, 2, none.clone()), l))
                .contains("--max-paths-per-ingress (10)")
        );
        assert!(
            err(check_with(&ingress(2, 600, none.clone()), l))
                .contains("--max-ingress-bytes (1000)")
        );
        let regex = serde_json::json!({ "p/use-regex": "true" });
        assert!(
            err(check_with(&ingress(3, 2, regex), l)).contains("--max-regex-paths-per-ingress (2)")
        );
        let rewrite = serde_json::json!({ "p/rewrite-target": "/" });
        assert!(check_with(&ingress(3, 2, rewrite), l).is_err());
        let long = serde_json::json!({ "p/x": "y".repeat(101) });
        assert!(
            err(check_with(&ingress(1, 2, long), l)).contains("--max-annotation-value-bytes (100)")
        );
    }
}
