//! Index validity: the indexes of pmw's schema that Postgres does not use (`indisvalid = false`)
//! or does not maintain (`indisready = false`), as `pmwctl status` and `/v1/ready` report them
//! (a warning, never a failure: the service works, but a lookup may be slow or a UNIQUE
//! constraint unenforced until the index is rebuilt).

use serde::Serialize;
use tokio_postgres::GenericClient;

/// One index Postgres does not use or does not maintain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokenIndex {
    pub index: String,
    pub table: String,
    /// `false`: the planner never uses it (and a UNIQUE one enforces nothing).
    pub valid: bool,
    /// `false`: writes do not even keep it up to date.
    pub ready: bool,
    pub unique: bool,
    /// `CREATE … INDEX …` as Postgres would recreate it.
    pub definition: String,
}

impl BrokenIndex {
    /// One line for operators: what is wrong and how to repair it.
    pub fn warning(&self) -> String {
        let what = match (self.valid, self.ready) {
            (false, false) => "invalid and not ready",
            (false, true) => "invalid",
            _ => "not ready",
        };
        format!(
            "index {} on {} is {what} (pg_index: indisvalid = {}, indisready = {}): Postgres {}; \
             drop it and create it again (REINDEX INDEX CONCURRENTLY {})",
            self.index,
            self.table,
            self.valid,
            self.ready,
            if self.unique {
                "does not use it and it enforces no uniqueness"
            } else {
                "does not use it"
            },
            self.index
        )
    }
}

/// Every index of the current schema with `indisvalid = false` or `indisready = false`, by table
/// and name.
pub async fn broken_indexes(
    c: &impl GenericClient,
) -> Result<Vec<BrokenIndex>, tokio_postgres::Error> {
    let rows = c.query(include_str!("sql/broken_indexes.sql"), &[]).await?;
    Ok(rows
        .iter()
        .map(|r| BrokenIndex {
            index: r.get(0),
            table: r.get(1),
            valid: r.get(2),
            ready: r.get(3),
            unique: r.get(4),
            definition: r.get(5),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_name_the_index_its_flags_and_the_repair() {
        let i = BrokenIndex {
            index: "subs_u".into(),
            table: "subscriptions".into(),
            valid: false,
            ready: true,
            unique: true,
            definition: "CREATE UNIQUE INDEX subs_u ON public.subscriptions (label)".into(),
        };
        assert_eq!(
            i.warning(),
            "index subs_u on subscriptions is invalid (pg_index: indisvalid = false, indisready = \
             true): Postgres does not use it and it enforces no uniqueness; drop it and create it \
             again (REINDEX INDEX CONCURRENTLY subs_u)"
        );
        let j = BrokenIndex {
            valid: false,
            ready: false,
            unique: false,
            ..i
        };
        assert!(j.warning().contains("is invalid and not ready"));
        assert!(j.warning().contains("Postgres does not use it;"));
    }
}
