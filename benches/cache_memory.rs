//! What one VM costs in the controller's caches: the heap bytes a cached VirtualMachine,
//! VirtualMachineInstance, virt-launcher Pod and start ControllerRevision keep alive, measured
//! with a counting global allocator, on the measuring thread (issue 15 item 3).
//!
//! The objects are real: `demo-vm` copies (docs/examples/vm-containerdisk.yaml) started by the
//! real controller on the embedded cluster until Running. Each object is then read back from
//! the API server as JSON and decoded again into the type the informer caches (`Arc<K>`, as
//! kube's reflector store holds it), while the allocator counts the bytes and allocations that
//! stay live. Heap bytes do not depend on the build profile, so `cargo test --bench
//! cache_memory` (debug, 20 VMs) gives the same per-object figures as `cargo bench`.
//!
//! Each allocation is counted twice: the bytes asked for, and the bytes jemalloc (the product's
//! allocator, src/main.rs) gives for them, the request rounded up to its size class (2,056 bytes
//! take a 2,560-byte slot): what the controller's heap holds. Not counted: the store's map
//! entries and `ObjectRef` keys and fragmentation; the controller process's RSS per VM is what
//! `benches/controller_start.rs` reports.
//!
//! Also counted the same way: a launcher pod as the simulated nodes cache it (the embedded
//! cluster's process, not the controller's; `src/sim/nodes/cached_pod.rs`) and before that
//! narrowing, and one entry of the embedded API server's audit log.
//!
//! Run: `cargo bench --bench cache_memory` (`CACHE_MEMORY_VMS`, default 200). Figures:
//! docs/performance.md ("Bytes per cached VM").

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};
use virtctl_rs::controller::manager::{Manager, ManagerConfig};
use virtctl_rs::controller::vm::revision::revision_for_cache;
use virtctl_rs::controller::vmi::launcher_cache::CachedPod;
use virtctl_rs::runtime::informer::{cache_copy, strip_for_cache};
use virtctl_rs::runtime::lease::LeaderElectionConfig;
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};
use virtctl_rs::sim::nodes::cached_pod::for_node_cache;

/// jemalloc, counting live bytes (asked for and given) and live allocations per thread.
struct Counting;

/// Live heap: bytes asked for, bytes jemalloc gave (size classes), allocations.
#[derive(Clone, Copy, Default)]
struct Live {
    bytes: isize,
    class_bytes: isize,
    allocations: isize,
}

impl std::ops::Sub for Live {
    type Output = Live;

    fn sub(self, o: Live) -> Live {
        Live {
            bytes: self.bytes - o.bytes,
            class_bytes: self.class_bytes - o.class_bytes,
            allocations: self.allocations - o.allocations,
        }
    }
}

thread_local! {
    /// This thread's live heap: what it allocated less what it freed. A measurement reads the
    /// measuring thread's alone: the process-wide sum also moved with frees on the runtime's
    /// other threads (tasks of the stopped cluster and manager still being dropped), which gave
    /// the first kind measured a negative size.
    static LIVE: Cell<Live> = const {
        Cell::new(Live { bytes: 0, class_bytes: 0, allocations: 0 })
    };
}

/// Adds to the calling thread's counts (nothing once its thread-locals are gone).
fn count(bytes: isize, class_bytes: isize, allocations: isize) {
    let _ = LIVE.try_with(|live| {
        let l = live.get();
        live.set(Live {
            bytes: l.bytes + bytes,
            class_bytes: l.class_bytes + class_bytes,
            allocations: l.allocations + allocations,
        });
    });
}

/// The calling thread's live heap.
fn live() -> Live {
    LIVE.with(Cell::get)
}

/// The bytes jemalloc holds for the live block at `p`.
fn class_size(p: *const u8) -> isize {
    (unsafe { tikv_jemallocator::usable_size(p) }) as isize
}

static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { JEMALLOC.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize, class_size(p), 1);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let class = class_size(ptr);
        unsafe { JEMALLOC.dealloc(ptr, layout) };
        count(-(layout.size() as isize), -class, -1);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old_class = class_size(ptr);
        let p = unsafe { JEMALLOC.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(
                new_size as isize - layout.size() as isize,
                class_size(p) - old_class,
                0,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn demo_vms(n: usize) -> Vec<VirtualMachine> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/examples/vm-containerdisk.yaml"
    ))
    .expect("docs/examples/vm-containerdisk.yaml");
    let base: VirtualMachine = serde_yaml::from_str(&text).expect("vm-containerdisk.yaml");
    (0..n)
        .map(|i| {
            let mut vm = base.clone();
            vm.metadata.name = Some(format!("demo-vm-{i:04}"));
            vm.metadata.namespace = Some("default".into());
            vm
        })
        .collect()
}

/// Per-kind figures: objects, mean JSON size, mean live heap bytes (asked for and in jemalloc's
/// size classes) and allocations per object.
struct KindCost {
    kind: &'static str,
    objects: usize,
    json_bytes: f64,
    heap_bytes: f64,
    class_bytes: f64,
    allocations: f64,
}

/// Decode every object of `texts` and keep it as the informer caches it (through the
/// controller's `transform` for that kind, then `cache_copy`), keeping all of them alive, and
/// count what stays allocated.
fn cost<K: Clone>(kind: &'static str, texts: &[String], decode: fn(&str) -> K) -> KindCost {
    let mut kept: Vec<Arc<K>> = Vec::with_capacity(texts.len());
    let before = live();
    for text in texts {
        kept.push(cache_copy(decode(text)));
    }
    let grown = live() - before;
    assert!(
        texts.is_empty() || grown.bytes > 0 && grown.allocations > 0,
        "{kind}: {} heap bytes and {} allocations kept for {} objects: the count is broken",
        grown.bytes,
        grown.allocations,
        texts.len()
    );
    let n = texts.len().max(1) as f64;
    let cost = KindCost {
        kind,
        objects: texts.len(),
        json_bytes: texts.iter().map(String::len).sum::<usize>() as f64 / n,
        heap_bytes: grown.bytes as f64 / n,
        class_bytes: grown.class_bytes as f64 / n,
        allocations: grown.allocations as f64 / n,
    };
    drop(kept);
    cost
}

/// The heap one audit entry holds: a copy of every entry the log keeps, counted (the copy's
/// buffer is one slot an entry, as the log's ring is).
fn audit_entry_cost(cluster: &EmbeddedCluster) -> KindCost {
    let before = live();
    let entries = cluster.api().audit().entries();
    let slack =
        (entries.capacity() - entries.len()) * std::mem::size_of::<virtctl_rs::sim::AuditEntry>();
    let grown = live() - before;
    let n = entries.len().max(1) as f64;
    KindCost {
        kind: "audit entry",
        objects: entries.len(),
        json_bytes: 0.0,
        heap_bytes: (grown.bytes - slack as isize) as f64 / n,
        class_bytes: 0.0,
        allocations: (grown.allocations - 1) as f64 / n,
    }
}

/// `text` decoded as `K` and passed through `transform`, as an informer of `K` caches it.
fn transformed<K: DeserializeOwned>(text: &str, transform: fn(&mut K)) -> K {
    let mut obj: K = serde_json::from_str(text).expect("decode cached kind");
    transform(&mut obj);
    obj
}

/// Each item of a list of `K`, as the JSON text the API server sent.
async fn item_texts<K>(client: &kube::Client, params: &ListParams) -> Vec<String>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + std::fmt::Debug,
{
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::erase::<K>(&()),
    );
    api.list(params)
        .await
        .expect("list")
        .items
        .iter()
        .map(|o| serde_json::to_string(o).expect("JSON"))
        .collect()
}

async fn run(n: usize) {
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig {
        nodes: (n / 100).max(2),
        ..Default::default()
    })
    .await
    .expect("embedded cluster");
    let ctrl = cluster
        .api()
        .client_with_agent("virt-controller")
        .await
        .expect("client");
    let config = ManagerConfig::new(LeaderElectionConfig::new("cache-memory-bench"));
    let (vm_rec, vmi_rec) = virtctl_rs::controller::reconcilers();
    let manager = Arc::new(
        Manager::start(ctrl, config, vm_rec, vmi_rec)
            .await
            .expect("manager"),
    );
    let cancel = CancellationToken::new();
    let task = {
        let (m, c) = (manager.clone(), cancel.clone());
        tokio::spawn(async move { m.run(c).await })
    };
    let user = cluster.client().await.expect("client");
    let vms: Api<VirtualMachine> = Api::namespaced(user.clone(), "default");
    futures::stream::iter(demo_vms(n))
        .for_each_concurrent(16, |vm| {
            let vms = vms.clone();
            async move {
                vms.create(&PostParams::default(), &vm)
                    .await
                    .expect("create VM");
            }
        })
        .await;
    let started = Instant::now();
    loop {
        let running = vms
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|v| {
                        v.status
                            .as_ref()
                            .and_then(|s| s.printable_status.as_deref())
                            == Some("Running")
                    })
                    .count()
            })
            .unwrap_or(0);
        if running == n {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "only {running}/{n} Running"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let all = ListParams::default();
    let launchers = ListParams::default().labels("kubevirt.io=virt-launcher");
    let vm_texts = item_texts::<VirtualMachine>(&user, &all).await;
    let vmi_texts = item_texts::<VirtualMachineInstance>(&user, &all).await;
    let pod_texts = item_texts::<Pod>(&user, &launchers).await;
    let rev_texts = item_texts::<ControllerRevision>(&user, &all).await;
    let audit = audit_entry_cost(&cluster);
    cancel.cancel();
    let _ = task.await;
    drop(manager);
    cluster.shutdown().await;

    let costs = [
        cost("VirtualMachine", &vm_texts, |t| {
            transformed::<VirtualMachine>(t, strip_for_cache)
        }),
        cost("VirtualMachineInstance", &vmi_texts, |t| {
            transformed::<VirtualMachineInstance>(t, strip_for_cache)
        }),
        // The pod informer decodes the narrow wire type (what the controllers read).
        cost("Pod (virt-launcher)", &pod_texts, |t| {
            serde_json::from_str::<CachedPod>(t).expect("decode pod")
        }),
        // The same fields as k8s-openapi's `Pod` (how it was cached before, what a reconcile
        // reads it as).
        cost("  (as a Pod)", &pod_texts, |t| {
            serde_json::from_str::<CachedPod>(t)
                .expect("decode pod")
                .to_pod()
        }),
        cost("  (whole spec)", &pod_texts, |t| {
            transformed::<Pod>(t, strip_for_cache)
        }),
        // The simulated nodes' pod cache (not the controller's): the whole pod as the watch
        // decodes it, and what `for_node_cache` keeps of it.
        cost("Pod, simulated nodes", &pod_texts, |t| {
            for_node_cache(serde_json::from_str::<Pod>(t).expect("decode pod"))
        }),
        cost("  (before: whole pod)", &pod_texts, |t| {
            serde_json::from_str::<Pod>(t).expect("decode pod")
        }),
        cost("ControllerRevision", &rev_texts, |t| {
            transformed::<ControllerRevision>(t, revision_for_cache)
        }),
        cost("  (data as a Value)", &rev_texts, |t| {
            transformed::<ControllerRevision>(t, strip_for_cache)
        }),
    ];
    println!(
        "\ncache_memory: {n} Running demo-vm copies, objects decoded as the informers cache them"
    );
    println!(
        "  {:<24} {:>7} {:>12} {:>16} {:>16} {:>12}",
        "kind", "objects", "JSON bytes", "heap bytes/obj", "jemalloc B/obj", "allocs/obj"
    );
    for c in &costs {
        println!(
            "  {:<24} {:>7} {:>12.0} {:>16.0} {:>16.0} {:>12.1}",
            c.kind, c.objects, c.json_bytes, c.heap_bytes, c.class_bytes, c.allocations
        );
    }
    println!(
        "  embedded API server's audit log: {} entries kept, {:.0} heap bytes per entry \
         ({} of them the entry itself), {:.1} allocations per entry",
        audit.objects,
        audit.heap_bytes,
        std::mem::size_of::<virtctl_rs::sim::AuditEntry>(),
        audit.allocations
    );
    let per_vm = |f: fn(&KindCost) -> f64| {
        costs
            .iter()
            .filter(|c| !c.kind.starts_with(' ') && !c.kind.contains("simulated"))
            .map(|c| f(c) * c.objects as f64 / n as f64)
            .sum::<f64>()
    };
    println!(
        "  per VM (the four cached kinds): {:.0} JSON bytes, {:.0} heap bytes ({:.1} KiB) asked \
         for, {:.0} ({:.1} KiB) in jemalloc's size classes, {:.0} allocations",
        per_vm(|c| c.json_bytes),
        per_vm(|c| c.heap_bytes),
        per_vm(|c| c.heap_bytes) / 1024.0,
        per_vm(|c| c.class_bytes),
        per_vm(|c| c.class_bytes) / 1024.0,
        per_vm(|c| c.allocations),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let n = if benching {
        env_usize("CACHE_MEMORY_VMS", 200)
    } else {
        20
    };
    tokio::runtime::Runtime::new()
        .expect("tokio runtime")
        .block_on(run(n));
}
