//! `shareplane limits import` on configurations written for this test in the shape of
//! envoyproxy/ratelimit's README examples (its own files are not copied): what imports keeps its
//! meaning (checked by running the written mappings), what cannot is refused with its path.

use shareplane::import::{import, Imported};
use shareplane_gateway::config::FileConfig;
use shareplane_gateway::mapping::Mapper;

fn run(files: &[(&str, &str)]) -> Result<Imported, Vec<String>> {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    import(&files).map_err(|es| es.iter().map(|e| e.to_string()).collect())
}

/// The gateway's mappings as written, loaded as the gateway loads its file.
fn mapper(out: &Imported) -> Mapper {
    let file: FileConfig =
        toml::from_str(&out.gateway).unwrap_or_else(|e| panic!("{e}\n{}", out.gateway));
    for (i, m) in file.descriptors.iter().enumerate() {
        assert!(
            m.problems().is_empty(),
            "descriptors[{i}]: {:?}",
            m.problems()
        );
    }
    Mapper::new(file.descriptors)
}

const TWO_TABLES: &str = "
domain: orders_db
descriptors:
  - key: table
    value: invoices
    rate_limit:
      unit: second
      requests_per_unit: 200
  - key: table
    value: customers
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 600
";

const TEXTS: &str = "
domain: sms
descriptors:
  # a promotion reaches each phone at most 3 times a minute
  - key: campaign
    value: promo
    descriptors:
      - key: phone
        rate_limit:
          unit: minute
          requests_per_unit: 3
  # every phone, whatever sends to it, 50 an hour
  - key: phone
    detailed_metric: true
    rate_limit:
      unit: hour
      requests_per_unit: 50
  - key: internal
    rate_limit:
      unlimited: true
";

const PER_ADDRESS: &str = "
domain: edge
descriptors:
  - key: client_ip
    rate_limit:
      unit: second
      requests_per_unit: 20
  - key: client_ip
    value: 10.1.2.3
    rate_limit:
      unit: second
      requests_per_unit: 100
";

#[test]
fn listed_values_templates_and_nested_paths_keep_their_meaning() {
    let out = run(&[
        ("tables.yaml", TWO_TABLES),
        ("sms.yaml", TEXTS),
        ("edge.yaml", PER_ADDRESS),
    ])
    .unwrap_or_else(|e| panic!("{e:#?}"));
    // The limits file reads back as `limits apply` reads it.
    let file = shareplane::config::parse_limits(&out.limits, &[])
        .unwrap_or_else(|e| panic!("{e}\n{}", out.limits));
    let ids: Vec<&str> = file.limits.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "orders_db.table.invoices",
            "orders_db.table.customers",
            "edge.client_ip.10.1.2.3"
        ]
    );
    assert_eq!(file.limits[0].rate.as_rps(), 200.0);
    assert_eq!(
        (
            file.limits[1].rate.as_rps(),
            file.limits[1].burst_ms,
            file.limits[1].shadow
        ),
        (10.0, 60_000, true)
    );
    let templates: Vec<(&str, &str)> = file
        .templates
        .iter()
        .map(|t| (t.id.as_str(), t.entry.as_str()))
        .collect();
    assert_eq!(
        templates,
        [
            ("sms.campaign.promo.phone", "phone"),
            ("sms.phone", "phone"),
            ("edge.client_ip", "client_ip")
        ]
    );
    // 50 an hour is 0.013888…/s: rounded down, and said so.
    assert_eq!(file.templates[1].rate.as_rps(), 0.013);
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("rounded down to 0.013/s")),
        "{:?}",
        out.notes
    );
    assert!(
        out.notes.iter().any(|n| n.contains("detailed_metric")),
        "{:?}",
        out.notes
    );
    assert!(
        out.notes.iter().any(|n| n.contains("unlimited")),
        "{:?}",
        out.notes
    );

    let m = mapper(&out);
    assert_eq!(
        m.limit_for("orders_db", &[("table", "invoices")]),
        Some("orders_db.table.invoices")
    );
    assert_eq!(m.limit_for("orders_db", &[("table", "orders")]), None);
    assert_eq!(m.limit_for("other", &[("table", "invoices")]), None);
    // The nested rule only on its whole path; the top-level one only alone.
    let promo = [("campaign", "promo"), ("phone", "555")];
    assert_eq!(m.limit_for("sms", &promo), Some("sms.campaign.promo.phone"));
    assert_eq!(m.limit_for("sms", &[("phone", "555")]), Some("sms.phone"));
    assert_eq!(
        m.limit_for("sms", &[("campaign", "receipt"), ("phone", "555")]),
        None
    );
    assert_eq!(
        m.limit_for("sms", &[("internal", "x")]),
        None,
        "unlimited: unmapped"
    );
    // The specific address before the key-only rule, as ratelimit tries them.
    assert_eq!(
        m.limit_for("edge", &[("client_ip", "10.1.2.3")]),
        Some("edge.client_ip.10.1.2.3")
    );
    assert_eq!(
        m.limit_for("edge", &[("client_ip", "10.9.9.9")]),
        Some("edge.client_ip")
    );
}

#[test]
fn what_cannot_keep_its_meaning_is_refused_with_its_path_all_at_once() {
    let bad = "
domain: shop
descriptors:
  - key: tenant
    descriptors:
      - key: user
        value: alice
        rate_limit: { unit: second, requests_per_unit: 10 }
  - key: route
    value: checkout
    descriptors:
      - key: user
        rate_limit:
          replaces: [ { name: other } ]
          unit: second
          requests_per_unit: 5
  - key: sku
    rate_limit: { unit: day, requests_per_unit: 1000 }
  - key: country
    value: xx
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: path
    value: /api/*
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: ip
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: ip
    value: 10.0.0.1
    rate_limit: { unlimited: true }
  - key: slow
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: odd
    colour: blue
";
    let errors = run(&[("bad.yaml", bad)]).err().unwrap_or_default();
    let expect = [
        "bad.yaml: descriptors[0].descriptors: nested under \"tenant\" without a value",
        "bad.yaml: descriptors[1].descriptors[0].rate_limit.replaces: ",
        "bad.yaml: descriptors[2].rate_limit.unit: day: ",
        "bad.yaml: descriptors[3].rate_limit.requests_per_unit: 0: ",
        "bad.yaml: descriptors[4].value: \"/api/*\": a wildcard",
        "bad.yaml: descriptors[6].rate_limit.unlimited: ",
        "bad.yaml: descriptors[7].rate_limit.requests_per_unit: 1 per 3600 s is below",
        "bad.yaml: descriptors[8].colour: unknown field",
    ];
    for e in expect {
        assert!(
            errors.iter().any(|x| x.starts_with(e)),
            "{e}\nnot in {errors:#?}"
        );
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
    // A file that is not YAML, or has no domain, is refused as a whole.
    let errors = run(&[("a.yaml", "domain: [x"), ("b.yaml", "descriptors: []")])
        .err()
        .unwrap_or_default();
    assert!(errors[0].starts_with("a.yaml: not YAML"), "{errors:?}");
    assert!(errors[1].starts_with("b.yaml: domain: "), "{errors:?}");
}
