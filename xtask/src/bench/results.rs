//! Reading criterion's saved results: `CRITERION_HOME/**/new/{benchmark,estimates}.json`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

/// One measured point: an implementation at a parameter value.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The implementation (criterion's function id).
    pub function: String,
    /// The parameter (criterion's value string), the x axis.
    pub parameter: String,
    /// Nanoseconds per element when the bench set `Throughput::Elements`, else per iteration.
    pub nanos: f64,
    /// The 95% confidence interval of `nanos`.
    pub interval: (f64, f64),
    /// Whether `nanos` is per element (`true`) or per iteration.
    pub per_element: bool,
}

/// A criterion group's points, keyed by group name.
pub type Groups = BTreeMap<String, Vec<Point>>;

#[derive(Deserialize)]
struct BenchmarkJson {
    group_id: String,
    function_id: Option<String>,
    value_str: Option<String>,
    throughput: Option<Throughput>,
}

#[derive(Deserialize)]
enum Throughput {
    Elements(u64),
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct EstimatesJson {
    mean: Estimate,
    slope: Option<Estimate>,
}

#[derive(Deserialize)]
struct Estimate {
    point_estimate: f64,
    confidence_interval: Interval,
}

#[derive(Deserialize)]
struct Interval {
    lower_bound: f64,
    upper_bound: f64,
}

/// Loads every result under `home`, grouped, points sorted by function then parameter.
pub fn load(home: &Path) -> anyhow::Result<Groups> {
    let mut groups = Groups::new();
    let mut pending = vec![home.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                // `base` and `change` hold earlier runs; only `new` is this run.
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if name == "new" {
                    if let Some((group, point)) = read_point(&path)? {
                        groups.entry(group).or_default().push(point);
                    }
                } else if name != "base" && name != "change" && name != "report" {
                    pending.push(path);
                }
            }
        }
    }
    for points in groups.values_mut() {
        points.sort_by(|a, b| {
            (a.function.as_str(), parameter_key(&a.parameter))
                .partial_cmp(&(b.function.as_str(), parameter_key(&b.parameter)))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    }
    Ok(groups)
}

fn read_point(new_dir: &Path) -> anyhow::Result<Option<(String, Point)>> {
    let benchmark = new_dir.join("benchmark.json");
    let estimates = new_dir.join("estimates.json");
    if !benchmark.is_file() || !estimates.is_file() {
        return Ok(None);
    }
    let read = |path: &Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    let id: BenchmarkJson = serde_json::from_str(&read(&benchmark)?)
        .with_context(|| format!("parsing {}", benchmark.display()))?;
    let estimates: EstimatesJson = serde_json::from_str(&read(&estimates)?)
        .with_context(|| format!("parsing {}", estimates.display()))?;
    // Criterion's own choice of the typical value: the regression slope when it has one.
    let typical = estimates.slope.as_ref().unwrap_or(&estimates.mean);
    let elements = match id.throughput {
        Some(Throughput::Elements(n)) if n > 0 => Some(n),
        _ => None,
    };
    let per = elements.map_or(1.0, |n| n as f64);
    let point = Point {
        function: id.function_id.unwrap_or_else(|| id.group_id.clone()),
        parameter: id.value_str.unwrap_or_default(),
        nanos: typical.point_estimate / per,
        interval: (
            typical.confidence_interval.lower_bound / per,
            typical.confidence_interval.upper_bound / per,
        ),
        per_element: elements.is_some(),
    };
    Ok(Some((id.group_id, point)))
}

/// Sort key of a parameter: numbers in numeric order before other strings.
pub fn parameter_key(parameter: &str) -> (f64, &str) {
    (parameter.parse::<f64>().unwrap_or(f64::INFINITY), parameter)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a criterion-like result directory.
    pub(crate) fn write_point(
        home: &Path,
        group: &str,
        function: &str,
        parameter: &str,
        nanos: f64,
        elements: Option<u64>,
    ) {
        let dir = home.join(group).join(function).join(parameter).join("new");
        std::fs::create_dir_all(&dir).unwrap();
        let throughput = match elements {
            Some(n) => format!("{{\"Elements\":{n}}}"),
            None => "null".into(),
        };
        std::fs::write(
            dir.join("benchmark.json"),
            format!(
                "{{\"group_id\":\"{group}\",\"function_id\":\"{function}\",\"value_str\":\"{parameter}\",\
                 \"throughput\":{throughput},\"full_id\":\"x\",\"directory_name\":\"x\",\"title\":\"x\"}}"
            ),
        )
        .unwrap();
        let estimate = |v: f64| {
            format!(
                "{{\"confidence_interval\":{{\"confidence_level\":0.95,\"lower_bound\":{},\"upper_bound\":{}}},\
                 \"point_estimate\":{v},\"standard_error\":1.0}}",
                v * 0.9,
                v * 1.1
            )
        };
        std::fs::write(
            dir.join("estimates.json"),
            format!(
                "{{\"mean\":{m},\"median\":{m},\"median_abs_dev\":{m},\"slope\":null,\"std_dev\":{m}}}",
                m = estimate(nanos)
            ),
        )
        .unwrap();
        // An earlier run's numbers must be ignored.
        let base = dir.parent().unwrap().join("base");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::copy(dir.join("benchmark.json"), base.join("benchmark.json")).unwrap();
    }

    #[test]
    fn loads_groups_per_element() {
        let home = std::env::temp_dir().join(format!("xtask-results-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        write_point(&home, "t/lookup", "t", "1000", 5000.0, Some(1000));
        write_point(&home, "t/lookup", "t", "20", 100.0, Some(20));
        write_point(&home, "t/lookup", "peer", "20", 300.0, Some(20));
        write_point(&home, "t/build", "t", "full", 7.0, None);
        let groups = load(&home).unwrap();
        std::fs::remove_dir_all(&home).unwrap();

        assert_eq!(groups.keys().collect::<Vec<_>>(), ["t/build", "t/lookup"]);
        let lookup = &groups["t/lookup"];
        let order: Vec<_> = lookup
            .iter()
            .map(|p| (p.function.as_str(), p.parameter.as_str()))
            .collect();
        assert_eq!(order, [("peer", "20"), ("t", "20"), ("t", "1000")]);
        assert_eq!(lookup[1].nanos, 5.0);
        assert!(lookup[1].per_element);
        assert_eq!(lookup[1].interval, (4.5, 5.5));
        assert_eq!(groups["t/build"][0].nanos, 7.0);
        assert!(!groups["t/build"][0].per_element);
    }
}
