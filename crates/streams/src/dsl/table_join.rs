//! Table–table joins (Kafka's `KTableKTableJoin`, `KTableKTableLeftJoin`,
//! `KTableKTableOuterJoin`): each side's changes join the other side's
//! current value through its value getter; results carry the larger of
//! both sides' timestamps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::ktable::{Change, KTable};
use super::processors::supplier;
use super::ValueGetter;
use crate::processor::Data;

/// Which table–table join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JoinKind {
    Inner,
    Left,
    Outer,
}

impl JoinKind {
    fn present<A, B>(self, l: &Option<A>, r: &Option<B>) -> bool {
        match self {
            JoinKind::Inner => l.is_some() && r.is_some(),
            JoinKind::Left => l.is_some(),
            JoinKind::Outer => l.is_some() || r.is_some(),
        }
    }
}

type Joiner<V1, V2, R> = Arc<dyn Fn(Option<&V1>, Option<&V2>) -> R + Send + Sync>;

impl<K: Data, V: Data> KTable<K, V> {
    fn table_join<V2: Data, R: Data>(
        &self,
        other: &KTable<K, V2>,
        kind: JoinKind,
        joiner: Joiner<V, V2, R>,
    ) -> KTable<K, R> {
        let (this_name, other_name, merge_name) = {
            let mut inner = self.b.borrow_mut();
            (
                inner.new_processor_name("KTABLE-JOINTHIS-"),
                inner.new_processor_name("KTABLE-JOINOTHER-"),
                match &self.next_name {
                    Some(n) => n.clone(),
                    None => inner.new_processor_name("KTABLE-MERGE-"),
                },
            )
        };
        self.enable_send_old();
        other.enable_send_old();
        let (this_getter, other_getter) = (self.value_getter(), other.value_getter());
        let flag = Arc::new(AtomicBool::new(false));
        // This side: changes of `self` joined with `other`'s value.
        let (og, j1, f1) = (other_getter.get.clone(), joiner.clone(), flag.clone());
        let this_s = supplier::<K, Change<V>>(
            None,
            Arc::new(move |ctx, r| {
                let o_ts = og(ctx, &r.key)?;
                if kind == JoinKind::Inner && o_ts.is_none() {
                    return Ok(());
                }
                // Kafka: the result's timestamp is the larger of both sides'.
                let ts = o_ts
                    .as_ref()
                    .map_or(r.timestamp, |(_, t)| r.timestamp.max(*t));
                let o = o_ts.map(|(v, _)| v);
                let res = |v: &Option<V>| kind.present(v, &o).then(|| j1(v.as_ref(), o.as_ref()));
                let new_value = res(&r.value.new_value);
                let old_value = if f1.load(Ordering::Relaxed) {
                    res(&r.value.old_value)
                } else {
                    None
                };
                let out = r.with_value(Change {
                    new_value,
                    old_value,
                });
                ctx.forward(out.with_timestamp(ts))
            }),
        );
        // Other side: changes of `other` joined with `self`'s value.
        let (tg, j2, f2) = (this_getter.get.clone(), joiner.clone(), flag.clone());
        let other_s = supplier::<K, Change<V2>>(
            None,
            Arc::new(move |ctx, r| {
                let t_ts = tg(ctx, &r.key)?;
                if matches!(kind, JoinKind::Inner | JoinKind::Left) && t_ts.is_none() {
                    return Ok(());
                }
                let ts = t_ts
                    .as_ref()
                    .map_or(r.timestamp, |(_, t)| r.timestamp.max(*t));
                let t = t_ts.map(|(v, _)| v);
                let res = |v: &Option<V2>| kind.present(&t, v).then(|| j2(t.as_ref(), v.as_ref()));
                let new_value = res(&r.value.new_value);
                let old_value = if f2.load(Ordering::Relaxed) {
                    res(&r.value.old_value)
                } else {
                    None
                };
                let out = r.with_value(Change {
                    new_value,
                    old_value,
                });
                ctx.forward(out.with_timestamp(ts))
            }),
        );
        {
            let mut inner = self.b.borrow_mut();
            let r = inner
                .topology
                .add_raw_processor(&this_name, this_s, &[&self.node]);
            inner.check(r);
            let r = inner
                .topology
                .add_raw_processor(&other_name, other_s, &[&other.node]);
            inner.check(r);
            let r = inner.topology.add_raw_processor(
                &merge_name,
                crate::topology::pass_through(),
                &[&this_name, &other_name],
            );
            inner.check(r);
            let os: Vec<&str> = other_getter.stores.iter().map(|s| s.as_str()).collect();
            let r = inner
                .topology
                .connect_processor_and_state_stores(&this_name, &os)
                .map(|_| ());
            inner.check(r);
            let ts: Vec<&str> = this_getter.stores.iter().map(|s| s.as_str()).collect();
            let r = inner
                .topology
                .connect_processor_and_state_stores(&other_name, &ts)
                .map(|_| ());
            inner.check(r);
            inner
                .topology
                .copartition(self.sources.union(&other.sources).cloned().collect());
        }
        let (tg, og) = (this_getter.get.clone(), other_getter.get.clone());
        let getter = ValueGetter {
            stores: this_getter
                .stores
                .iter()
                .chain(&other_getter.stores)
                .cloned()
                .collect(),
            get: Arc::new(move |ctx, k| {
                let t = tg(ctx, k)?;
                let o = og(ctx, k)?;
                let (tv, tt) = (t.as_ref().map(|(v, _)| v), t.as_ref().map(|(_, ts)| *ts));
                let (ov, ot) = (o.as_ref().map(|(v, _)| v), o.as_ref().map(|(_, ts)| *ts));
                let ts = tt.into_iter().chain(ot).max().unwrap_or(0);
                Ok(kind.present(&tv, &ov).then(|| (joiner(tv, ov), ts)))
            }),
        };
        let mut old_flags = vec![flag];
        old_flags.extend(self.old_flags.iter().cloned());
        old_flags.extend(other.old_flags.iter().cloned());
        KTable {
            b: self.b.clone(),
            node: merge_name,
            key_serde: self.key_serde.clone(),
            value_serde: None,
            sources: self.sources.union(&other.sources).cloned().collect(),
            getter,
            old_flags,
            next_name: None,
            store: None,
            materializers: self
                .materializers
                .iter()
                .chain(&other.materializers)
                .cloned()
                .collect(),
        }
    }

    /// Inner table–table join (`KTABLE-JOINTHIS-`, `KTABLE-JOINOTHER-`,
    /// `KTABLE-MERGE-`).
    pub fn join<V2: Data, R: Data>(
        &self,
        other: &KTable<K, V2>,
        joiner: impl Fn(&V, &V2) -> R + Send + Sync + 'static,
    ) -> KTable<K, R> {
        self.table_join(
            other,
            JoinKind::Inner,
            Arc::new(move |a, b| {
                joiner(a.expect("inner join: left"), b.expect("inner join: right"))
            }),
        )
    }

    /// Left table–table join: every key of this table, with `None` when the
    /// other has no value.
    pub fn left_join<V2: Data, R: Data>(
        &self,
        other: &KTable<K, V2>,
        joiner: impl Fn(&V, Option<&V2>) -> R + Send + Sync + 'static,
    ) -> KTable<K, R> {
        self.table_join(
            other,
            JoinKind::Left,
            Arc::new(move |a, b| joiner(a.expect("left join: left"), b)),
        )
    }

    /// Outer table–table join: every key of either table.
    pub fn outer_join<V2: Data, R: Data>(
        &self,
        other: &KTable<K, V2>,
        joiner: impl Fn(Option<&V>, Option<&V2>) -> R + Send + Sync + 'static,
    ) -> KTable<K, R> {
        self.table_join(other, JoinKind::Outer, Arc::new(joiner))
    }
}
