//! Renders the key tables as the reference tables of
//! docs/configuration.md (a test keeps the file in step with the tables).

use super::{topic_synonyms, Area, BrokerConfig, Check, Kind, BROKER_KEYS};

/// Areas in the order docs/configuration.md lists them, with titles.
const AREAS: &[(Area, &str)] = &[
    (Area::Server, "Server"),
    (Area::Network, "Listeners, connections and requests"),
    (Area::KRaft, "KRaft and the metadata log"),
    (Area::Topics, "Topic creation"),
    (Area::Log, "Logs: topic config defaults and the data folder"),
    (Area::Cleaner, "Log cleaner (compaction)"),
    (Area::Replication, "Replication"),
    (Area::Groups, "Consumer groups and committed offsets"),
    (Area::ShareGroups, "Share groups"),
    (Area::Transactions, "Transactions and producer ids"),
    (Area::Quotas, "Quotas"),
    (Area::TieredStorage, "Tiered storage"),
    (Area::Metrics, "Metrics"),
    (
        Area::Security,
        "Security: authorizer, principals, delegation tokens",
    ),
    (Area::Tls, "TLS"),
    (Area::Sasl, "SASL"),
];

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Bool => "boolean",
        Kind::Str => "string",
        Kind::Int => "int",
        Kind::Short => "short",
        Kind::Long => "long",
        Kind::Double => "double",
        Kind::List => "list",
        Kind::Class => "class",
        Kind::Password => "password",
    }
}

fn topic_kind_name(k: sluice_storage::config::ConfigType) -> &'static str {
    use sluice_storage::config::ConfigType as T;
    match k {
        T::Boolean => "boolean",
        T::String => "string",
        T::Int => "int",
        T::Long => "long",
        T::Double => "double",
        T::List => "list",
    }
}

fn valid_values(c: Check) -> String {
    match c {
        Check::Any => String::new(),
        Check::AtLeast(n) => format!("[{n},...]"),
        Check::Between(a, b) => format!("[{a},...,{b}]"),
        Check::RatioBetween(a, b) => format!("[{a},...,{b}]"),
        Check::OneOf(v) | Check::ListOf(v) => v.join(", "),
        Check::OneOfIgnoreCase(v) => format!("{} (any case)", v.join(", ")),
        Check::NonEmpty => "non-empty".into(),
        Check::Custom(_, d) => d.into(),
    }
}

fn cell_default(d: Option<&str>) -> String {
    match d {
        None => "(unset)".into(),
        Some("") => "(empty)".into(),
        Some(d) => d.replace('|', "\\|"),
    }
}

impl BrokerConfig {
    /// The broker and topic key tables of docs/configuration.md, rendered
    /// from the broker key table and the storage crate's topic key table.
    pub fn reference_markdown() -> String {
        let mut out = String::new();
        for (area, title) in AREAS {
            out.push_str(&format!(
                "### {title}\n\n| key | default | type | valid values | effect | meaning |\n|---|---|---|---|---|---|\n"
            ));
            for k in BROKER_KEYS
                .iter()
                .filter(|k| k.area == *area && !k.internal)
            {
                out.push_str(&format!(
                    "| `{}` | {} | {} | {} | {} | {} |\n",
                    k.name,
                    cell_default(k.default),
                    kind_name(k.kind),
                    valid_values(k.check),
                    if k.used { "yes" } else { "no" },
                    k.doc
                ));
            }
            out.push('\n');
        }
        out.push_str("### Topic configs\n\n| key | default | type | broker default key | effect | meaning |\n|---|---|---|---|---|---|\n");
        for t in sluice_storage::config::TOPIC_KEYS {
            let server: Vec<String> = topic_synonyms(t.name)
                .iter()
                .map(|(k, _)| format!("`{k}`"))
                .collect();
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} | {} |\n",
                t.name,
                cell_default(Some(t.default)),
                topic_kind_name(t.kind),
                if server.is_empty() {
                    "—".into()
                } else {
                    server.join(" > ")
                },
                if t.used { "yes" } else { "no" },
                t.doc
            ));
        }
        out
    }
}

#[cfg(test)]
mod doc_tests {
    const BEGIN: &str = "<!-- generated: config tables begin -->\n";
    const END: &str = "<!-- generated: config tables end -->";

    /// docs/configuration.md holds the tables rendered from the key tables.
    /// Run with `SLUICE_WRITE_DOCS=1` to rewrite them after a change.
    #[test]
    fn configuration_reference_matches_the_key_tables() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
        let doc = std::fs::read_to_string(path).expect("docs/configuration.md");
        let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
            panic!("docs/configuration.md lacks the generated markers");
        };
        let want = super::BrokerConfig::reference_markdown();
        let have = &doc[b + BEGIN.len()..e];
        if have != want {
            if std::env::var_os("SLUICE_WRITE_DOCS").is_some() {
                let new = format!("{}{BEGIN}{want}{}", &doc[..b], &doc[e..]);
                std::fs::write(path, new).expect("write docs");
            } else {
                panic!("docs/configuration.md is out of date: run SLUICE_WRITE_DOCS=1 cargo test -p sluice-broker configuration_reference");
            }
        }
    }
}
