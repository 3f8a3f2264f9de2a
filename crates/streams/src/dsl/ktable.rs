//! `KTable` (Kafka's `KTableImpl`): a changelog stream of [`Change`]s
//! with per-key current values, filter / map_values / to_stream,
//! re-grouping; and `GlobalKTable` (table–table joins are in `table_join`).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::config::{Consumed, Grouped, Materialized};
use super::grouped::KGroupedTable;
use super::kstream::KStream;
use super::processors::{supplier, KvAccess};
use super::{Shared, Sources, ValueGetter};
use crate::error::{Result, StreamsError};
use crate::processor::{Data, ProcessorContext, Record};
use crate::serde::{SerdeRef, Serdes};
use crate::topology::{raw_deserializer, StoreBuilder, StoreType};

/// A table update (Kafka's `Change`): the key's new value and, where a
/// downstream operation needs it, its old value. `None` is "no value".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change<V> {
    /// The new value (`None`: deleted).
    pub new_value: Option<V>,
    /// The old value (`None`: none, or not sent).
    pub old_value: Option<V>,
}

/// A table (Kafka's `KTable`).
pub struct KTable<K, V> {
    pub(crate) b: Shared,
    pub(crate) node: String,
    pub(crate) key_serde: Option<SerdeRef<K>>,
    pub(crate) value_serde: Option<SerdeRef<V>>,
    pub(crate) sources: Sources,
    pub(crate) getter: ValueGetter<K, V>,
    /// Whether this node sends old values, and the upstream flags that
    /// must be on for it to.
    pub(crate) old_flags: Vec<Arc<AtomicBool>>,
    pub(crate) next_name: Option<String>,
    /// The store, if this table is materialized.
    pub(crate) store: Option<String>,
    /// Materialize the upstream table sources this table's values come
    /// from (Kafka materializes a source table only when needed).
    pub(crate) materializers: Vec<Rc<dyn Fn()>>,
}

impl<K, V> std::fmt::Debug for KTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KTable")
            .field("node", &self.node)
            .field("store", &self.store)
            .finish()
    }
}

impl<K, V> Clone for KTable<K, V> {
    fn clone(&self) -> Self {
        Self {
            b: self.b.clone(),
            node: self.node.clone(),
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
            sources: self.sources.clone(),
            getter: self.getter.clone(),
            old_flags: self.old_flags.clone(),
            next_name: self.next_name.clone(),
            store: self.store.clone(),
            materializers: self.materializers.clone(),
        }
    }
}

/// A global table (Kafka's `GlobalKTable`): the whole topic in a store on
/// every instance, for stream–global-table joins.
pub struct GlobalKTable<K, V> {
    pub(crate) getter: ValueGetter<K, V>,
    pub(crate) store: String,
}

impl<K, V> std::fmt::Debug for GlobalKTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalKTable")
            .field("store", &self.store)
            .finish()
    }
}

impl<K, V> GlobalKTable<K, V> {
    /// The store's name.
    pub fn store_name(&self) -> &str {
        &self.store
    }
}

/// Adds the store for `m` (named `name`) to the topology, connected to
/// `processor`.
pub(crate) fn add_store<K: Data, V: Data>(
    b: &Shared,
    name: &str,
    m: &Materialized<K, V>,
    processor: &str,
) {
    let mut sb = match m.store_type {
        StoreType::InMemory => StoreBuilder::in_memory(name),
        StoreType::Default => StoreBuilder::default_type(name),
    }
    .with_timestamps();
    if !m.logging {
        sb = sb.with_logging_disabled();
    }
    if m.caching {
        sb = sb.with_caching_enabled();
    }
    let mut inner = b.borrow_mut();
    let r = inner.topology.add_state_store(sb, &[processor]).map(|_| ());
    inner.check(r);
}

/// A getter reading a store.
pub(crate) fn store_getter<K: Data, V: Data>(acc: KvAccess<K, V>) -> ValueGetter<K, V> {
    let store = acc.store.clone();
    ValueGetter {
        stores: vec![store],
        get: Arc::new(move |ctx, k| acc.get(ctx, k)),
    }
}

/// Forwards a change now, unless the store is cached (then the cache's
/// flush forwards it), as Kafka's `TimestampedTupleForwarder`.
pub(crate) fn forward_change<K: Data, V: Data>(
    ctx: &mut ProcessorContext<'_>,
    store: &str,
    key: K,
    new_value: Option<V>,
    old_value: Option<V>,
    send_old: bool,
    ts: i64,
) -> Result<()> {
    if ctx.store_is_cached(store) {
        return Ok(());
    }
    ctx.forward(Record::new(
        key,
        Change {
            new_value,
            old_value: if send_old { old_value } else { None },
        },
        ts,
    ))
}

/// Registers the cache flush listener forwarding flushed entries as
/// changes (Kafka's `TimestampedCacheFlushListener`).
pub(crate) fn register_flush_listener<K: Data, V: Data>(
    ctx: &mut ProcessorContext<'_>,
    acc: KvAccess<K, V>,
    send_old: Arc<AtomicBool>,
) -> Result<()> {
    if !ctx.store_is_cached(&acc.store) {
        return Ok(());
    }
    let store = acc.store.clone();
    ctx.set_flush_listener(
        &store,
        Arc::new(move |ctx, e, old| {
            let key = acc.key_serde.deserialize(&acc.store, &e.key)?;
            let new_value = e
                .value
                .as_ref()
                .map(|v| acc.decode(v).map(|(v, _)| v))
                .transpose()?;
            let old_value = old.map(|v| acc.decode(&v).map(|(v, _)| v)).transpose()?;
            if new_value.is_none() && old_value.is_none() {
                return Ok(());
            }
            let send = send_old.load(Ordering::Relaxed);
            ctx.forward(Record::new(
                key,
                Change {
                    new_value,
                    old_value: if send { old_value } else { None },
                },
                e.timestamp,
            ))
        }),
    );
    Ok(())
}

/// The supplier of a table source (Kafka's `KTableSource`): puts each
/// record into the store and forwards the change.
fn table_source_supplier<K: Data, V: Data, VIn: Data>(
    acc: KvAccess<K, V>,
    send_old: Arc<AtomicBool>,
    to_opt: fn(VIn) -> Option<V>,
) -> crate::processor::RawSupplier {
    let acc2 = acc.clone();
    let flag2 = send_old.clone();
    supplier::<K, VIn>(
        Some(Arc::new(move |ctx| {
            register_flush_listener(ctx, acc2.clone(), flag2.clone())
        })),
        Arc::new(move |ctx, r| {
            let new_value = to_opt(r.value);
            if acc.key_is_null(&r.key)? {
                return Ok(()); // Kafka's KTableSource skips null keys
            }
            if !ctx.has_store(&acc.store) {
                // Not materialized: forward the update without an old value.
                let ts = ctx.timestamp();
                return ctx.forward(Record::new(
                    r.key,
                    Change {
                        new_value,
                        old_value: None,
                    },
                    ts,
                ));
            }
            let ts = ctx.timestamp();
            let old = acc.get(ctx, &r.key)?.map(|(v, _)| v);
            acc.put(ctx, &r.key, new_value.as_ref(), ts)?;
            let send = send_old.load(Ordering::Relaxed);
            forward_change(ctx, &acc.store, r.key, new_value, old, send, ts)
        }),
    )
}

fn serdes_or_err<K: Data, V: Data>(
    b: &Shared,
    what: &str,
    ks: Option<SerdeRef<K>>,
    vs: Option<SerdeRef<V>>,
) -> Option<(SerdeRef<K>, SerdeRef<V>)> {
    match (ks, vs) {
        (Some(k), Some(v)) => Some((k, v)),
        _ => {
            b.borrow_mut()
                .check::<()>(Err(StreamsError::Topology(format!(
                    "{what} needs key and value serdes (give them with Materialized::with)"
                ))));
            None
        }
    }
}

pub(crate) fn source<K: Data, V: Data>(
    b: &Shared,
    topic: &str,
    consumed: Consumed<K, V>,
    m: Materialized<K, V>,
) -> KTable<K, V> {
    let store = m
        .name
        .clone()
        .unwrap_or_else(|| b.borrow_mut().new_store_name(&format!("{topic}-")));
    let (src, proc_name) = {
        let mut inner = b.borrow_mut();
        match &consumed.name {
            Some(n) => (format!("{n}-source"), n.clone()),
            None => (
                inner.new_processor_name("KSTREAM-SOURCE-"),
                inner.new_processor_name("KTABLE-SOURCE-"),
            ),
        }
    };
    let ks = m
        .key_serde
        .clone()
        .unwrap_or_else(|| consumed.key_serde.clone());
    let vs = m
        .value_serde
        .clone()
        .unwrap_or_else(|| consumed.value_serde.clone());
    let acc = KvAccess {
        store: store.clone(),
        key_serde: ks.clone(),
        value_serde: vs.clone(),
    };
    let flag = Arc::new(AtomicBool::new(false));
    {
        let mut inner = b.borrow_mut();
        let de = raw_deserializer(
            consumed.key_serde.clone(),
            Serdes::nullable(consumed.value_serde.clone()),
        );
        let r = inner.topology.add_source_refs(
            &src,
            vec![crate::topology::TopicRef {
                name: topic.to_string(),
                internal: false,
            }],
            de,
        );
        inner.check(r);
        let s = table_source_supplier::<K, V, Option<V>>(acc.clone(), flag.clone(), |v| v);
        let r = inner.topology.add_raw_processor(&proc_name, s, &[&src]);
        inner.check(r);
    }
    let done = Rc::new(Cell::new(false));
    let (b2, store2, proc2) = (b.clone(), store.clone(), proc_name.clone());
    let m2 = Materialized::<K, V> {
        name: m.name.clone(),
        key_serde: None,
        value_serde: None,
        caching: m.caching,
        logging: m.logging,
        store_type: m.store_type,
    };
    let materialize: Rc<dyn Fn()> = Rc::new(move || {
        if !done.replace(true) {
            add_store(&b2, &store2, &m2, &proc2);
        }
    });
    if m.name.is_some() {
        materialize();
    }
    KTable {
        b: b.clone(),
        node: proc_name,
        key_serde: Some(ks),
        value_serde: Some(vs),
        sources: [src].into(),
        getter: store_getter(acc),
        old_flags: vec![flag],
        next_name: None,
        store: m.name.clone(),
        materializers: vec![materialize],
    }
}

pub(crate) fn global_source<K: Data, V: Data>(
    b: &Shared,
    topic: &str,
    consumed: Consumed<K, V>,
    m: Materialized<K, V>,
) -> GlobalKTable<K, V> {
    let store = m
        .name
        .clone()
        .unwrap_or_else(|| b.borrow_mut().new_store_name(&format!("{topic}-")));
    let (src, proc_name) = {
        let mut inner = b.borrow_mut();
        (
            inner.new_processor_name("KSTREAM-SOURCE-"),
            inner.new_processor_name("KTABLE-SOURCE-"),
        )
    };
    let ks = m
        .key_serde
        .clone()
        .unwrap_or_else(|| consumed.key_serde.clone());
    let vs = m
        .value_serde
        .clone()
        .unwrap_or_else(|| consumed.value_serde.clone());
    let acc = KvAccess {
        store: store.clone(),
        key_serde: ks,
        value_serde: vs,
    };
    let sb = match m.store_type {
        StoreType::InMemory => StoreBuilder::in_memory(&store),
        StoreType::Default => StoreBuilder::default_type(&store),
    }
    .with_timestamps();
    let de = raw_deserializer(
        consumed.key_serde.clone(),
        Serdes::nullable(consumed.value_serde.clone()),
    );
    let s = table_source_supplier::<K, V, Option<V>>(
        acc.clone(),
        Arc::new(AtomicBool::new(false)),
        |v| v,
    );
    let mut inner = b.borrow_mut();
    let r = inner
        .topology
        .add_global_store(sb, &src, topic, de, &proc_name, s);
    inner.check(r);
    GlobalKTable {
        getter: store_getter(acc),
        store,
    }
}

pub(crate) fn from_stream<K: Data, V: Data>(
    s: &KStream<K, V>,
    m: Materialized<K, V>,
) -> KTable<K, V> {
    let name = s.name_for("KSTREAM-TOTABLE-");
    let store = m
        .name
        .clone()
        .unwrap_or_else(|| s.b.borrow_mut().new_store_name("KSTREAM-TOTABLE-"));
    let Some((ks, vs)) = serdes_or_err(
        &s.b,
        "to_table",
        m.key_serde.clone().or_else(|| s.key_serde.clone()),
        m.value_serde.clone().or_else(|| s.value_serde.clone()),
    ) else {
        return dead_table(s);
    };
    let acc = KvAccess {
        store: store.clone(),
        key_serde: ks.clone(),
        value_serde: vs.clone(),
    };
    let flag = Arc::new(AtomicBool::new(false));
    let sup = table_source_supplier::<K, V, V>(acc.clone(), flag.clone(), Some);
    let _ = s.child::<K, V>(name.clone(), sup, None, None, false);
    add_store(&s.b, &store, &m, &name);
    KTable {
        b: s.b.clone(),
        node: name,
        key_serde: Some(ks),
        value_serde: Some(vs),
        sources: s.sources.clone(),
        getter: store_getter(acc),
        old_flags: vec![flag],
        next_name: None,
        store: Some(store),
        materializers: Vec::new(),
    }
}

/// A placeholder after a build error (the error is reported by `build`).
fn dead_table<K: Data, V: Data, X>(s: &KStream<K, X>) -> KTable<K, V> {
    KTable {
        b: s.b.clone(),
        node: s.node.clone(),
        key_serde: None,
        value_serde: None,
        sources: s.sources.clone(),
        getter: ValueGetter {
            stores: Vec::new(),
            get: Arc::new(|_, _| Ok(None)),
        },
        old_flags: Vec::new(),
        next_name: None,
        store: None,
        materializers: Vec::new(),
    }
}

/// Computes a derived table's value (`None`: no value).
type Compute<K, V, V2> = Arc<dyn Fn(&K, &V) -> Option<V2> + Send + Sync>;

impl<K: Data, V: Data> KTable<K, V> {
    /// Names the next operation.
    pub fn named(mut self, named: super::Named) -> Self {
        self.next_name = Some(named.0);
        self
    }

    /// The store of a materialized table (for interactive queries and tests).
    pub fn queryable_store_name(&self) -> Option<&str> {
        self.store.as_deref()
    }

    fn name_for(&self, prefix: &str) -> String {
        match &self.next_name {
            Some(n) => n.clone(),
            None => self.b.borrow_mut().new_processor_name(prefix),
        }
    }

    /// Makes this table (and what it depends on) send old values.
    pub(crate) fn enable_send_old(&self) {
        for f in &self.old_flags {
            f.store(true, Ordering::Relaxed);
        }
        for m in &self.materializers {
            m();
        }
    }

    /// The getter of current values, materializing upstream sources.
    pub(crate) fn value_getter(&self) -> ValueGetter<K, V> {
        for m in &self.materializers {
            m();
        }
        self.getter.clone()
    }

    fn derived<V2: Data>(
        &self,
        name: String,
        s: crate::processor::RawSupplier,
        value_serde: Option<SerdeRef<V2>>,
        getter: ValueGetter<K, V2>,
        flag: Arc<AtomicBool>,
    ) -> KTable<K, V2> {
        let mut inner = self.b.borrow_mut();
        let r = inner.topology.add_raw_processor(&name, s, &[&self.node]);
        inner.check(r);
        drop(inner);
        let mut old_flags = vec![flag];
        old_flags.extend(self.old_flags.iter().cloned());
        KTable {
            b: self.b.clone(),
            node: name,
            key_serde: self.key_serde.clone(),
            value_serde,
            sources: self.sources.clone(),
            getter,
            old_flags,
            next_name: None,
            store: None,
            materializers: self.materializers.clone(),
        }
    }

    /// Keeps entries satisfying `pred` (`KTABLE-FILTER-`); an entry that
    /// stops satisfying it becomes a delete downstream.
    pub fn filter(&self, pred: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KTable<K, V> {
        let name = self.name_for("KTABLE-FILTER-");
        let pred = Arc::new(pred);
        let flag = Arc::new(AtomicBool::new(false));
        let (p2, f2) = (pred.clone(), flag.clone());
        let s = supplier::<K, Change<V>>(
            None,
            Arc::new(move |ctx, r| {
                let send_old = f2.load(Ordering::Relaxed);
                let k = &r.key;
                let new_value = r.value.new_value.clone().filter(|v| p2(k, v));
                let old_value = if send_old {
                    r.value.old_value.clone().filter(|v| p2(k, v))
                } else {
                    None
                };
                if send_old && new_value.is_none() && old_value.is_none() {
                    return Ok(());
                }
                ctx.forward(r.with_value(Change {
                    new_value,
                    old_value,
                }))
            }),
        );
        let pg = self.getter.get.clone();
        let getter = ValueGetter {
            stores: self.getter.stores.clone(),
            get: Arc::new(move |ctx, k| Ok(pg(ctx, k)?.filter(|(v, _)| pred(k, v)))),
        };
        self.derived(name, s, self.value_serde.clone(), getter, flag)
    }

    /// A filter or value mapper whose result is materialized in a named
    /// store (Kafka's `filter`/`mapValues` with `Materialized.as`): writes
    /// each result to the store, forwards through the cache, and serves
    /// joins from the store. An unnamed `Materialized` only burns a store
    /// index, as Kafka does not materialize non-queryable stores.
    fn derive_materialized<V2: Data>(
        &self,
        prefix: &str,
        m: Materialized<K, V2>,
        default_value_serde: Option<SerdeRef<V2>>,
        compute: Compute<K, V, V2>,
    ) -> Option<KTable<K, V2>> {
        let store = match &m.name {
            Some(n) => n.clone(),
            None => {
                self.b.borrow_mut().new_store_name(prefix);
                return None;
            }
        };
        let name = self.name_for(prefix);
        let (Some(ks), Some(vs)) = (
            m.key_serde.clone().or_else(|| self.key_serde.clone()),
            m.value_serde.clone().or(default_value_serde),
        ) else {
            self.b
                .borrow_mut()
                .check::<()>(Err(StreamsError::Topology(format!(
                "{name} materializes {store}: it needs key and value serdes (Materialized::with)"
            ))));
            return None;
        };
        let acc = KvAccess {
            store: store.clone(),
            key_serde: ks.clone(),
            value_serde: vs.clone(),
        };
        let flag = Arc::new(AtomicBool::new(false));
        let (acc2, flag2) = (acc.clone(), flag.clone());
        let (acc3, flag3) = (acc.clone(), flag.clone());
        let s = supplier::<K, Change<V>>(
            Some(Arc::new(move |ctx| {
                register_flush_listener(ctx, acc2.clone(), flag2.clone())
            })),
            Arc::new(move |ctx, r| {
                let send_old = flag3.load(Ordering::Relaxed);
                let new_value = r.value.new_value.as_ref().and_then(|v| compute(&r.key, v));
                let old_value = if send_old {
                    acc3.get(ctx, &r.key)?.map(|(v, _)| v)
                } else {
                    None
                };
                if send_old && new_value.is_none() && old_value.is_none() {
                    return Ok(());
                }
                let ts = r.timestamp;
                acc3.put(ctx, &r.key, new_value.as_ref(), ts)?;
                forward_change(ctx, &acc3.store, r.key, new_value, old_value, send_old, ts)
            }),
        );
        let mut t = self.derived(name.clone(), s, Some(vs), store_getter(acc), flag);
        add_store(&self.b, &store, &m, &name);
        t.store = Some(store);
        // The store serves joins: upstream sources need not materialize.
        t.materializers = Vec::new();
        t.old_flags.truncate(1);
        Some(t)
    }

    /// [`KTable::filter`] materialized per `materialized`.
    pub fn filter_materialized(
        &self,
        pred: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V> {
        let pred = Arc::new(pred);
        let p2 = pred.clone();
        let vs = self.value_serde.clone();
        let compute = Arc::new(move |k: &K, v: &V| p2(k, v).then(|| v.clone()));
        match self.derive_materialized("KTABLE-FILTER-", materialized, vs, compute) {
            Some(t) => t,
            None => self.filter(move |k, v| pred(k, v)),
        }
    }

    /// [`KTable::map_values`] materialized per `materialized`.
    pub fn map_values_materialized<V2: Data>(
        &self,
        f: impl Fn(&V) -> V2 + Send + Sync + 'static,
        materialized: Materialized<K, V2>,
    ) -> KTable<K, V2> {
        let f = Arc::new(f);
        let f2 = f.clone();
        let compute = Arc::new(move |_k: &K, v: &V| Some(f2(v)));
        match self.derive_materialized("KTABLE-MAPVALUES-", materialized, None, compute) {
            Some(t) => t,
            None => self.map_values(move |v| f(v)),
        }
    }

    /// Drops entries satisfying `pred` (`KTABLE-FILTER-`).
    pub fn filter_not(
        &self,
        pred: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
    ) -> KTable<K, V> {
        self.filter(move |k, v| !pred(k, v))
    }

    /// Maps each value (`KTABLE-MAPVALUES-`).
    pub fn map_values<V2: Data>(
        &self,
        f: impl Fn(&V) -> V2 + Send + Sync + 'static,
    ) -> KTable<K, V2> {
        let name = self.name_for("KTABLE-MAPVALUES-");
        let f = Arc::new(f);
        let flag = Arc::new(AtomicBool::new(false));
        let (f2, fl2) = (f.clone(), flag.clone());
        let s = supplier::<K, Change<V>>(
            None,
            Arc::new(move |ctx, r| {
                let send_old = fl2.load(Ordering::Relaxed);
                let new_value = r.value.new_value.as_ref().map(|v| f2(v));
                let old_value = if send_old {
                    r.value.old_value.as_ref().map(|v| f2(v))
                } else {
                    None
                };
                ctx.forward(r.with_value(Change {
                    new_value,
                    old_value,
                }))
            }),
        );
        let pg = self.getter.get.clone();
        let getter = ValueGetter {
            stores: self.getter.stores.clone(),
            get: Arc::new(move |ctx, k| Ok(pg(ctx, k)?.map(|(v, t)| (f(&v), t)))),
        };
        self.derived(name, s, None, getter, flag)
    }

    /// The table's changelog as a stream (`KTABLE-TOSTREAM-`); deletes are
    /// `None` values.
    pub fn to_stream(&self) -> KStream<K, Option<V>> {
        let name = self.name_for("KTABLE-TOSTREAM-");
        let s = supplier::<K, Change<V>>(
            None,
            Arc::new(|ctx, r| {
                let v = r.value.new_value.clone();
                ctx.forward(r.with_value(v))
            }),
        );
        let mut inner = self.b.borrow_mut();
        let r = inner.topology.add_raw_processor(&name, s, &[&self.node]);
        inner.check(r);
        drop(inner);
        KStream {
            b: self.b.clone(),
            node: name,
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone().map(Serdes::nullable),
            repartition_required: false,
            sources: self.sources.clone(),
            next_name: None,
        }
    }

    /// Re-groups the table by a new key and value (`KTABLE-SELECT-`), for
    /// re-aggregation with adder and subtractor.
    pub fn group_by<K2: Data, V2: Data>(
        &self,
        f: impl Fn(&K, &V) -> (K2, V2) + Send + Sync + 'static,
        grouped: Grouped<K2, V2>,
    ) -> KGroupedTable<K2, V2> {
        let name = self.name_for("KTABLE-SELECT-");
        self.enable_send_old();
        let s = supplier::<K, Change<V>>(
            None,
            Arc::new(move |ctx, r| {
                let ts = r.timestamp;
                if let Some(o) = &r.value.old_value {
                    let (k2, v2) = f(&r.key, o);
                    let rec = Record {
                        key: k2,
                        value: Change {
                            new_value: None,
                            old_value: Some(v2),
                        },
                        timestamp: ts,
                        headers: r.headers.clone(),
                    };
                    ctx.forward(rec)?;
                }
                if let Some(n) = &r.value.new_value {
                    let (k2, v2) = f(&r.key, n);
                    let rec = Record {
                        key: k2,
                        value: Change {
                            new_value: Some(v2),
                            old_value: None,
                        },
                        timestamp: ts,
                        headers: r.headers.clone(),
                    };
                    ctx.forward(rec)?;
                }
                Ok(())
            }),
        );
        let mut inner = self.b.borrow_mut();
        let r = inner.topology.add_raw_processor(&name, s, &[&self.node]);
        inner.check(r);
        drop(inner);
        KGroupedTable {
            b: self.b.clone(),
            node: name,
            key_serde: grouped.key_serde,
            value_serde: grouped.value_serde,
            repartition_name: grouped.name,
        }
    }
}
