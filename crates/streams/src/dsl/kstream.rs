//! `KStream` (Kafka's `KStreamImpl`): record-by-record operations,
//! branching, merging, re-keying and repartitioning, sinks, grouping, and
//! stream–table / stream–global-table joins.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use super::config::{Branched, Consumed, Grouped, Produced, Repartitioned};
use super::grouped::KGroupedStream;
use super::ktable::{GlobalKTable, KTable};
use super::processors::supplier;
use super::{Shared, Sources, ValueGetter};
use crate::error::StreamsError;
use crate::processor::{Data, Processor, ProcessorContext, RawProcessor, Record, TypedProcessor};
use crate::serde::SerdeRef;
use crate::topology::{raw_deserializer, raw_serializer, TopicRef, REPARTITION_TOPIC_SUFFIX};

/// A record stream (Kafka's `KStream`).
pub struct KStream<K, V> {
    pub(crate) b: Shared,
    pub(crate) node: String,
    pub(crate) key_serde: Option<SerdeRef<K>>,
    pub(crate) value_serde: Option<SerdeRef<V>>,
    pub(crate) repartition_required: bool,
    pub(crate) sources: Sources,
    pub(crate) next_name: Option<String>,
}

impl<K, V> Clone for KStream<K, V> {
    fn clone(&self) -> Self {
        Self {
            b: self.b.clone(),
            node: self.node.clone(),
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
            repartition_required: self.repartition_required,
            sources: self.sources.clone(),
            next_name: self.next_name.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for KStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KStream").field("node", &self.node).finish()
    }
}

pub(crate) fn source<K: Data, V: Data>(
    b: &Shared,
    topics: &[&str],
    consumed: Consumed<K, V>,
) -> KStream<K, V> {
    let mut inner = b.borrow_mut();
    let name = consumed
        .name
        .clone()
        .unwrap_or_else(|| inner.new_processor_name("KSTREAM-SOURCE-"));
    let refs = topics
        .iter()
        .map(|t| TopicRef {
            name: t.to_string(),
            internal: false,
        })
        .collect();
    let de = raw_deserializer(consumed.key_serde.clone(), consumed.value_serde.clone());
    let r = inner.topology.add_source_refs(&name, refs, de);
    inner.check(r);
    drop(inner);
    KStream {
        b: b.clone(),
        sources: [name.clone()].into(),
        node: name,
        key_serde: Some(consumed.key_serde),
        value_serde: Some(consumed.value_serde),
        repartition_required: false,
        next_name: None,
    }
}

/// Whether `name` is a generated name (Kafka: `KSTREAM.*-[0-9]{10}`).
fn is_generated(name: &str) -> bool {
    let Some(pos) = name.rfind('-') else {
        return false;
    };
    let digits = &name[pos + 1..];
    name.starts_with("KSTREAM") && digits.len() == 10 && digits.bytes().all(|c| c.is_ascii_digit())
}

/// Adds sink → (internal topic) → source for a repartition, with Kafka's
/// names; returns the new source's name. `filter` adds Kafka's null-key
/// filter in front of the sink (grouping and joins do).
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_repartition<K: Data, V: Data>(
    b: &Shared,
    parent: &str,
    prefix: &str,
    key_serde: Option<SerdeRef<K>>,
    value_serde: Option<SerdeRef<V>>,
    filter: bool,
    partitions: Option<i32>,
) -> Option<String> {
    let mut inner = b.borrow_mut();
    let topic = if prefix.ends_with(REPARTITION_TOPIC_SUFFIX) {
        prefix.to_string()
    } else {
        format!("{prefix}{REPARTITION_TOPIC_SUFFIX}")
    };
    let gen_sink = inner.new_processor_name("KSTREAM-SINK-");
    let gen_filter = filter.then(|| inner.new_processor_name("KSTREAM-FILTER-"));
    let gen_source = inner.new_processor_name("KSTREAM-SOURCE-");
    let (sink, filter_name, source) = if is_generated(prefix) {
        (gen_sink, gen_filter, gen_source)
    } else {
        (
            format!("{topic}-sink"),
            filter.then(|| format!("{topic}-filter")),
            format!("{topic}-source"),
        )
    };
    let (Some(ks), Some(vs)) = (key_serde, value_serde) else {
        inner.check::<()>(Err(StreamsError::Topology(format!(
            "repartition topic {topic} needs key and value serdes (give them with Grouped/Repartitioned::with)"
        ))));
        return None;
    };
    let mut sink_parent = parent.to_string();
    if let Some(f) = &filter_name {
        let s = supplier::<K, V>(None, Arc::new(|ctx, r| ctx.forward(r)));
        let r = inner.topology.add_raw_processor(f, s, &[parent]);
        inner.check(r)?;
        sink_parent = f.clone();
    }
    let tref = TopicRef {
        name: topic.clone(),
        internal: true,
    };
    let r = inner.topology.add_sink_ref(
        &sink,
        tref.clone(),
        raw_serializer(ks.clone(), vs.clone()),
        &[&sink_parent],
    );
    inner.check(r)?;
    let r = inner
        .topology
        .add_source_refs(&source, vec![tref], raw_deserializer(ks, vs));
    inner.check(r)?;
    inner.topology.repartition_topics.insert(topic, partitions);
    Some(source)
}

impl<K: Data, V: Data> KStream<K, V> {
    /// Names the next operation (Kafka's `Named` argument).
    pub fn named(mut self, named: super::Named) -> Self {
        self.next_name = Some(named.0);
        self
    }

    pub(crate) fn name_for(&self, prefix: &str) -> String {
        match &self.next_name {
            Some(n) => n.clone(),
            None => self.b.borrow_mut().new_processor_name(prefix),
        }
    }

    /// Adds a processor child of this stream's node.
    pub(crate) fn child<K2: Data, V2: Data>(
        &self,
        name: String,
        s: crate::processor::RawSupplier,
        key_serde: Option<SerdeRef<K2>>,
        value_serde: Option<SerdeRef<V2>>,
        repartition_required: bool,
    ) -> KStream<K2, V2> {
        let mut inner = self.b.borrow_mut();
        let r = inner.topology.add_raw_processor(&name, s, &[&self.node]);
        inner.check(r);
        drop(inner);
        KStream {
            b: self.b.clone(),
            node: name,
            key_serde,
            value_serde,
            repartition_required,
            sources: self.sources.clone(),
            next_name: None,
        }
    }

    /// Keeps records satisfying `pred` (`KSTREAM-FILTER-`).
    pub fn filter(&self, pred: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KStream<K, V> {
        let name = self.name_for("KSTREAM-FILTER-");
        let s = supplier::<K, V>(
            None,
            Arc::new(move |ctx, r| {
                if pred(&r.key, &r.value) {
                    ctx.forward(r)
                } else {
                    Ok(())
                }
            }),
        );
        self.child(
            name,
            s,
            self.key_serde.clone(),
            self.value_serde.clone(),
            self.repartition_required,
        )
    }

    /// Drops records satisfying `pred` (`KSTREAM-FILTER-`).
    pub fn filter_not(
        &self,
        pred: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
    ) -> KStream<K, V> {
        self.filter(move |k, v| !pred(k, v))
    }

    /// Maps each record to a new key and value (`KSTREAM-MAP-`); marks the
    /// stream for repartitioning before grouping or joining.
    pub fn map<K2: Data, V2: Data>(
        &self,
        f: impl Fn(K, V) -> (K2, V2) + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        let name = self.name_for("KSTREAM-MAP-");
        let s = supplier::<K, V>(
            None,
            Arc::new(move |ctx, r| {
                let (k, v) = f(r.key, r.value);
                ctx.forward(Record {
                    key: k,
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers,
                })
            }),
        );
        self.child(name, s, None, None, true)
    }

    /// Maps each value (`KSTREAM-MAPVALUES-`); keeps the key.
    pub fn map_values<V2: Data>(
        &self,
        f: impl Fn(V) -> V2 + Send + Sync + 'static,
    ) -> KStream<K, V2> {
        let name = self.name_for("KSTREAM-MAPVALUES-");
        let s = supplier::<K, V>(
            None,
            Arc::new(move |ctx, r| {
                let v = f(r.value);
                ctx.forward(Record {
                    key: r.key,
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers,
                })
            }),
        );
        self.child(
            name,
            s,
            self.key_serde.clone(),
            None,
            self.repartition_required,
        )
    }

    /// Maps each record to any number of records (`KSTREAM-FLATMAP-`);
    /// marks the stream for repartitioning.
    pub fn flat_map<K2: Data, V2: Data, I>(
        &self,
        f: impl Fn(K, V) -> I + Send + Sync + 'static,
    ) -> KStream<K2, V2>
    where
        I: IntoIterator<Item = (K2, V2)>,
    {
        let name = self.name_for("KSTREAM-FLATMAP-");
        let s = supplier::<K, V>(
            None,
            Arc::new(move |ctx, r| {
                for (k, v) in f(r.key, r.value) {
                    ctx.forward(Record {
                        key: k,
                        value: v,
                        timestamp: r.timestamp,
                        headers: r.headers.clone(),
                    })?;
                }
                Ok(())
            }),
        );
        self.child(name, s, None, None, true)
    }

    /// Maps each value to any number of values (`KSTREAM-FLATMAPVALUES-`).
    pub fn flat_map_values<V2: Data, I>(
        &self,
        f: impl Fn(V) -> I + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        I: IntoIterator<Item = V2>,
    {
        let name = self.name_for("KSTREAM-FLATMAPVALUES-");
        let s = supplier::<K, V>(
            None,
            Arc::new(move |ctx, r| {
                for v in f(r.value) {
                    ctx.forward(Record {
                        key: r.key.clone(),
                        value: v,
                        timestamp: r.timestamp,
                        headers: r.headers.clone(),
                    })?;
                }
                Ok(())
            }),
        );
        self.child(
            name,
            s,
            self.key_serde.clone(),
            None,
            self.repartition_required,
        )
    }

    /// Calls `f` on each record and passes it on (`KSTREAM-PEEK-`).
    pub fn peek(&self, f: impl Fn(&K, &V) + Send + Sync + 'static) -> KStream<K, V> {
        let name = self.name_for("KSTREAM-PEEK-");
        let s = supplier::<K, V>(
            None,
            Arc::new(move |ctx, r| {
                f(&r.key, &r.value);
                ctx.forward(r)
            }),
        );
        self.child(
            name,
            s,
            self.key_serde.clone(),
            self.value_serde.clone(),
            self.repartition_required,
        )
    }

    /// Calls `f` on each record; terminal (`KSTREAM-FOREACH-`).
    pub fn foreach(&self, f: impl Fn(&K, &V) + Send + Sync + 'static) {
        let name = self.name_for("KSTREAM-FOREACH-");
        let s = supplier::<K, V>(
            None,
            Arc::new(move |_ctx, r| {
                f(&r.key, &r.value);
                Ok(())
            }),
        );
        let _ = self.child::<K, V>(name, s, None, None, false);
    }

    /// Sets a new key from each record (`KSTREAM-KEY-SELECT-`); marks the
    /// stream for repartitioning.
    pub fn select_key<K2: Data>(
        &self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
    ) -> KStream<K2, V> {
        let name = self.name_for("KSTREAM-KEY-SELECT-");
        let s = supplier::<K, V>(
            None,
            Arc::new(move |ctx, r| {
                let k = f(&r.key, &r.value);
                ctx.forward(r.with_key(k))
            }),
        );
        self.child(name, s, None, self.value_serde.clone(), true)
    }

    /// Merges `other` into this stream (`KSTREAM-MERGE-`).
    pub fn merge(&self, other: &KStream<K, V>) -> KStream<K, V> {
        let name = self.name_for("KSTREAM-MERGE-");
        let mut inner = self.b.borrow_mut();
        let r = inner.topology.add_raw_processor(
            &name,
            crate::topology::pass_through(),
            &[&self.node, &other.node],
        );
        inner.check(r);
        drop(inner);
        KStream {
            b: self.b.clone(),
            node: name,
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
            repartition_required: self.repartition_required || other.repartition_required,
            sources: self.sources.union(&other.sources).cloned().collect(),
            next_name: None,
        }
    }

    /// Writes to `topic` (`KSTREAM-SINK-`).
    pub fn to(&self, topic: &str, produced: Produced<K, V>) {
        let name = produced
            .name
            .clone()
            .or_else(|| self.next_name.clone())
            .unwrap_or_else(|| self.b.borrow_mut().new_processor_name("KSTREAM-SINK-"));
        let mut inner = self.b.borrow_mut();
        let r = inner.topology.add_sink_ref(
            &name,
            TopicRef {
                name: topic.to_string(),
                internal: false,
            },
            raw_serializer(produced.key_serde, produced.value_serde),
            &[&self.node],
        );
        inner.check(r);
    }

    /// Repartitions through `<application.id>-<name>-repartition`
    /// (Kafka's `repartition`; name `KSTREAM-REPARTITION-<index>` when not
    /// given).
    pub fn repartition(&self, rep: Repartitioned<K, V>) -> KStream<K, V> {
        let name = rep
            .name
            .clone()
            .or_else(|| self.next_name.clone())
            .unwrap_or_else(|| {
                self.b
                    .borrow_mut()
                    .new_processor_name("KSTREAM-REPARTITION-")
            });
        let ks = rep.key_serde.or_else(|| self.key_serde.clone());
        let vs = rep.value_serde.or_else(|| self.value_serde.clone());
        let src = add_repartition(
            &self.b,
            &self.node,
            &name,
            ks.clone(),
            vs.clone(),
            false,
            rep.partitions,
        )
        .unwrap_or_default();
        KStream {
            b: self.b.clone(),
            sources: [src.clone()].into(),
            node: src,
            key_serde: ks,
            value_serde: vs,
            repartition_required: false,
            next_name: None,
        }
    }

    /// Runs a processor-API processor on this stream
    /// (`KSTREAM-PROCESSOR-`), connected to `stores` (added with
    /// [`super::StreamsBuilder::add_state_store`]).
    pub fn process<K2: Data, V2: Data, P, F>(
        &self,
        supplier_fn: F,
        stores: &[&str],
    ) -> KStream<K2, V2>
    where
        P: Processor<K, V> + 'static,
        F: Fn() -> P + Send + Sync + 'static,
    {
        let name = self.name_for("KSTREAM-PROCESSOR-");
        let s: crate::processor::RawSupplier = Arc::new(move || {
            Box::new(TypedProcessor::<P, K, V>::new(supplier_fn())) as Box<dyn RawProcessor>
        });
        let out = self.child::<K2, V2>(name.clone(), s, None, None, true);
        let mut inner = self.b.borrow_mut();
        let r = inner
            .topology
            .connect_processor_and_state_stores(&name, stores)
            .map(|_| ());
        inner.check(r);
        drop(inner);
        out
    }

    /// Splits the stream (Kafka's `split`): records go to the first branch
    /// whose predicate they satisfy.
    pub fn split(&self) -> BranchedKStream<K, V> {
        let name = self.name_for("KSTREAM-BRANCH-");
        BranchedKStream::new(self, name, false)
    }

    /// Kafka's older `branch`: one stream per predicate
    /// (`KSTREAM-BRANCH-` then `KSTREAM-BRANCHCHILD-` children).
    #[allow(clippy::type_complexity)]
    pub fn branch(
        &self,
        preds: Vec<Box<dyn Fn(&K, &V) -> bool + Send + Sync>>,
    ) -> Vec<KStream<K, V>> {
        let name = self.name_for("KSTREAM-BRANCH-");
        let mut bs = BranchedKStream::new(self, name, true);
        let mut out = Vec::new();
        for p in preds {
            let p: Pred<K, V> = Arc::from(p);
            out.push(bs.add_branch(p, None, false));
        }
        out
    }

    fn grouped_serdes<K2: Data>(&self, g: &Grouped<K2, V>) -> Option<SerdeRef<V>> {
        g.value_serde.clone().or_else(|| self.value_serde.clone())
    }

    /// Groups by the current key (Kafka's `groupByKey`); a repartition
    /// topic is added if the key was changed upstream.
    pub fn group_by_key(&self, grouped: Grouped<K, V>) -> KGroupedStream<K, V> {
        KGroupedStream {
            b: self.b.clone(),
            node: self.node.clone(),
            key_serde: grouped.key_serde.clone().or_else(|| self.key_serde.clone()),
            value_serde: self.grouped_serdes(&grouped),
            repartition_required: self.repartition_required,
            repartition_name: grouped.name,
            sources: self.sources.clone(),
            repartition_source: Default::default(),
        }
    }

    /// Groups by a new key (Kafka's `groupBy`: `KSTREAM-KEY-SELECT-` then
    /// a repartition).
    pub fn group_by<K2: Data>(
        &self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
        grouped: Grouped<K2, V>,
    ) -> KGroupedStream<K2, V> {
        let vs = self.grouped_serdes(&grouped);
        let selected = self.select_key(f);
        KGroupedStream {
            b: self.b.clone(),
            node: selected.node,
            key_serde: grouped.key_serde,
            value_serde: vs,
            repartition_required: true,
            repartition_name: grouped.name,
            sources: self.sources.clone(),
            repartition_source: Default::default(),
        }
    }

    /// Repartitions for a join if the key changed upstream.
    fn for_join(&self) -> KStream<K, V> {
        if !self.repartition_required {
            return self.clone();
        }
        let src = add_repartition(
            &self.b,
            &self.node,
            &self.node,
            self.key_serde.clone(),
            self.value_serde.clone(),
            true,
            None,
        )
        .unwrap_or_default();
        KStream {
            b: self.b.clone(),
            sources: [src.clone()].into(),
            node: src,
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
            repartition_required: false,
            next_name: self.next_name.clone(),
        }
    }

    fn table_join<VT: Data, VR: Data>(
        &self,
        table: &KTable<K, VT>,
        prefix: &str,
        left: bool,
        joiner: LeftJoiner<V, VT, VR>,
    ) -> KStream<K, VR> {
        let mut this = self.clone();
        if this.key_serde.is_none() {
            this.key_serde = table.key_serde.clone();
        }
        let this = this.for_join();
        let name = this.name_for(prefix);
        let getter: ValueGetter<K, VT> = table.value_getter();
        let get = getter.get.clone();
        let s = supplier::<K, V>(
            None,
            Arc::new(move |ctx: &mut ProcessorContext<'_>, r: Record<K, V>| {
                let other = get(ctx, &r.key)?.map(|(v, _)| v);
                if other.is_none() && !left {
                    return Ok(());
                }
                let out = joiner(&r.value, other.as_ref());
                ctx.forward(r.with_value(out))
            }),
        );
        let out = this.child::<K, VR>(name.clone(), s, this.key_serde.clone(), None, false);
        let mut inner = self.b.borrow_mut();
        let stores: Vec<&str> = getter.stores.iter().map(|s| s.as_str()).collect();
        let r = inner
            .topology
            .connect_processor_and_state_stores(&name, &stores)
            .map(|_| ());
        inner.check(r);
        inner
            .topology
            .copartition(this.sources.union(&table.sources).cloned().collect());
        drop(inner);
        out
    }

    /// Inner stream–table join (`KSTREAM-JOIN-`): each record joins the
    /// table's current value for its key; no match, no output.
    pub fn join<VT: Data, VR: Data>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, &VT) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR> {
        self.table_join(
            table,
            "KSTREAM-JOIN-",
            false,
            Arc::new(move |v, t| joiner(v, t.expect("inner join has a match"))),
        )
    }

    /// Left stream–table join (`KSTREAM-LEFTJOIN-`): every record yields
    /// output, with `None` when the table has no value.
    pub fn left_join<VT: Data, VR: Data>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, Option<&VT>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR> {
        self.table_join(table, "KSTREAM-LEFTJOIN-", true, Arc::new(joiner))
    }

    fn global_join<GK: Data, VG: Data, VR: Data>(
        &self,
        table: &GlobalKTable<GK, VG>,
        prefix: &str,
        left: bool,
        key_selector: KeySelector<K, V, GK>,
        joiner: LeftJoiner<V, VG, VR>,
    ) -> KStream<K, VR> {
        let name = self.name_for(prefix);
        let get = table.getter.get.clone();
        let s = supplier::<K, V>(
            None,
            Arc::new(move |ctx: &mut ProcessorContext<'_>, r: Record<K, V>| {
                let gk = key_selector(&r.key, &r.value);
                let other = get(ctx, &gk)?.map(|(v, _)| v);
                if other.is_none() && !left {
                    return Ok(());
                }
                let out = joiner(&r.value, other.as_ref());
                ctx.forward(r.with_value(out))
            }),
        );
        self.child::<K, VR>(
            name,
            s,
            self.key_serde.clone(),
            None,
            self.repartition_required,
        )
    }

    /// Inner stream–global-table join (`KSTREAM-JOIN-`): `key_selector`
    /// picks the table key; no repartitioning, no co-partitioning.
    pub fn join_global<GK: Data, VG: Data, VR: Data>(
        &self,
        table: &GlobalKTable<GK, VG>,
        key_selector: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, &VG) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR> {
        self.global_join(
            table,
            "KSTREAM-JOIN-",
            false,
            Arc::new(key_selector),
            Arc::new(move |v, g| joiner(v, g.expect("inner join has a match"))),
        )
    }

    /// Left stream–global-table join (`KSTREAM-LEFTJOIN-`).
    pub fn left_join_global<GK: Data, VG: Data, VR: Data>(
        &self,
        table: &GlobalKTable<GK, VG>,
        key_selector: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&VG>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR> {
        self.global_join(
            table,
            "KSTREAM-LEFTJOIN-",
            true,
            Arc::new(key_selector),
            Arc::new(joiner),
        )
    }

    /// Turns the stream into a table (Kafka's `toTable`, `KSTREAM-TOTABLE-`)
    /// materialized per `materialized`.
    pub fn to_table(&self, materialized: super::Materialized<K, V>) -> KTable<K, V> {
        super::ktable::from_stream(self, materialized)
    }
}

type LeftJoiner<V, VT, VR> = Arc<dyn Fn(&V, Option<&VT>) -> VR + Send + Sync>;
type KeySelector<K, V, KR> = Arc<dyn Fn(&K, &V) -> KR + Send + Sync>;
type Pred<K, V> = Arc<dyn Fn(&K, &V) -> bool + Send + Sync>;
type Branches<K, V> = Arc<RwLock<Vec<(Pred<K, V>, String)>>>;

/// The branches of a split stream (Kafka's `BranchedKStream`).
pub struct BranchedKStream<K, V> {
    parent: KStream<K, V>,
    name: String,
    branches: Branches<K, V>,
    legacy: bool,
    result: BTreeMap<String, KStream<K, V>>,
}

impl<K, V> std::fmt::Debug for BranchedKStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BranchedKStream")
            .field("name", &self.name)
            .finish()
    }
}

impl<K: Data, V: Data> BranchedKStream<K, V> {
    fn new(parent: &KStream<K, V>, name: String, legacy: bool) -> Self {
        let branches: Branches<K, V> = Arc::new(RwLock::new(Vec::new()));
        let bs = branches.clone();
        let s = supplier::<K, V>(
            None,
            Arc::new(move |ctx, r| {
                let child = {
                    let g = bs
                        .read()
                        .map_err(|_| StreamsError::IllegalState("branches poisoned".into()))?;
                    g.iter()
                        .find(|(p, _)| p(&r.key, &r.value))
                        .map(|(_, c)| c.clone())
                };
                match child {
                    Some(c) => ctx.forward_to(r, &c),
                    None => Ok(()),
                }
            }),
        );
        let mut inner = parent.b.borrow_mut();
        let r = inner.topology.add_raw_processor(&name, s, &[&parent.node]);
        inner.check(r);
        drop(inner);
        Self {
            parent: parent.clone(),
            name,
            branches,
            legacy,
            result: BTreeMap::new(),
        }
    }

    /// Adds a branch; `default` is the default branch (Kafka's index 0).
    fn add_branch(
        &mut self,
        pred: Pred<K, V>,
        branched: Option<String>,
        default: bool,
    ) -> KStream<K, V> {
        let index = if default {
            0
        } else {
            self.branches.read().map(|g| g.len()).unwrap_or(0) + 1
        };
        let child = if self.legacy {
            self.parent
                .b
                .borrow_mut()
                .new_processor_name("KSTREAM-BRANCHCHILD-")
        } else {
            let child = match branched {
                Some(n) => format!("{}{n}", self.name),
                None => format!("{}{index}", self.name),
            };
            // Kafka burns an index per branch.
            self.parent.b.borrow_mut().new_processor_name(&child);
            child
        };
        if let Ok(mut g) = self.branches.write() {
            g.push((pred, child.clone()));
        }
        let mut inner = self.parent.b.borrow_mut();
        let r = inner.topology.add_raw_processor(
            &child,
            crate::topology::pass_through(),
            &[&self.name],
        );
        inner.check(r);
        drop(inner);
        let s = KStream {
            b: self.parent.b.clone(),
            node: child.clone(),
            key_serde: self.parent.key_serde.clone(),
            value_serde: self.parent.value_serde.clone(),
            repartition_required: self.parent.repartition_required,
            sources: self.parent.sources.clone(),
            next_name: None,
        };
        self.result.insert(child, s.clone());
        s
    }

    /// Adds a branch for records satisfying `pred`, named
    /// `<split name><branched name>` or `<split name><index>` (from 1).
    pub fn branch(
        mut self,
        pred: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        branched: Branched,
    ) -> Self {
        self.add_branch(Arc::new(pred), branched.0, false);
        self
    }

    /// Adds a branch for all remaining records and returns the branches
    /// by name.
    pub fn default_branch(mut self, branched: Branched) -> BTreeMap<String, KStream<K, V>> {
        self.add_branch(Arc::new(|_, _| true), branched.0, true);
        self.result
    }

    /// Returns the branches by name; other records are dropped.
    pub fn no_default_branch(self) -> BTreeMap<String, KStream<K, V>> {
        self.result
    }
}
