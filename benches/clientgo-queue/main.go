// clientgo-queue runs the work-queue scenario of benches/queue_vs_client_go.rs on client-go's
// rate-limiting work queue, so scripts/bench-queue.sh can compare both queues on the same
// machine in the same minute.
//
// The scenario (issue 15, issue 46): KEYS objects `ns-<i%100>/vm-<i>`; one producer goroutine
// adds every object's key ROUNDS times, calling runtime.Gosched every 1,000 adds (the Rust
// producer is a task that yields as often); N workers loop Get -> Forget -> Done until Get
// reports shutdown; the producer shuts the queue down after its last add. Time: first add until
// every worker has returned. The queue is what KubeVirt's VM controller builds
// (pkg/virt-controller/watch/vm/vm.go:153-156: NewTypedRateLimitingQueueWithConfig over
// DefaultTypedControllerRateLimiter), with no metrics provider on either side.
//
// Keys:
//   - string: built per add from the object's metadata by controller.KeyFunc, which is
//     cache.DeletionHandlingMetaNamespaceKeyFunc (kubevirt pkg/controller/keys.go:10), as
//     enqueueVm does (vm.go:2296-2304): one string allocated per add.
//   - shared: built once per object before the clock starts; every add passes the same string
//     (a Go string header is copied, its bytes are shared).
//
// Output, one line per worker count: `workers=N adds_per_sec=X` (adds are calls of Add, KEYS x
// ROUNDS per scenario), measured over at least -min-seconds of repeated scenarios after one
// warm-up scenario.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

const yieldEvery = 1000

type scenario struct {
	objects []*metav1.ObjectMeta
	shared  []string
	rounds  int
}

// run is one scenario with n workers; it returns the time from the first add until every
// worker has returned, and how many keys the workers processed.
func (s *scenario) run(n int) (time.Duration, int) {
	q := workqueue.NewTypedRateLimitingQueueWithConfig[string](
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "bench"},
	)
	var wg sync.WaitGroup
	counts := make([]int, n)
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Forget(key)
				q.Done(key)
				counts[w]++
			}
		}(w)
	}
	start := time.Now()
	sinceYield := 0
	for r := 0; r < s.rounds; r++ {
		for i := range s.objects {
			if s.shared != nil {
				q.Add(s.shared[i])
			} else {
				key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(s.objects[i])
				if err != nil {
					fmt.Fprintln(os.Stderr, "key:", err)
					os.Exit(1)
				}
				q.Add(key)
			}
			sinceYield++
			if sinceYield == yieldEvery {
				sinceYield = 0
				runtime.Gosched()
			}
		}
	}
	q.ShutDown()
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for _, c := range counts {
		total += c
	}
	return elapsed, total
}

func main() {
	keysFlag := flag.String("keys", "string", "string (built per add) or shared")
	nKeys := flag.Int("n", 100000, "distinct keys")
	rounds := flag.Int("rounds", 5, "adds per key")
	workersFlag := flag.String("workers", "1,3,10", "worker counts")
	minSeconds := flag.Float64("min-seconds", 1, "measure each worker count for at least this long")
	flag.Parse()
	runtime.GOMAXPROCS(2)

	s := scenario{rounds: *rounds}
	for i := 0; i < *nKeys; i++ {
		s.objects = append(s.objects, &metav1.ObjectMeta{
			Namespace: "ns-" + strconv.Itoa(i%100),
			Name:      "vm-" + strconv.Itoa(i),
		})
	}
	switch *keysFlag {
	case "string":
	case "shared":
		for _, o := range s.objects {
			s.shared = append(s.shared, o.Namespace+"/"+o.Name)
		}
	default:
		fmt.Fprintln(os.Stderr, "-keys: want string or shared, got", *keysFlag)
		os.Exit(2)
	}
	adds := *nKeys * *rounds
	for _, field := range strings.Split(*workersFlag, ",") {
		n, err := strconv.Atoi(field)
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "-workers: not a worker count:", field)
			os.Exit(2)
		}
		s.run(n) // warm-up
		var elapsed time.Duration
		scenarios := 0
		for elapsed.Seconds() < *minSeconds {
			d, processed := s.run(n)
			if processed < *nKeys || processed > adds {
				fmt.Fprintf(os.Stderr, "workers=%d processed %d keys, want %d..%d\n", n, processed, *nKeys, adds)
				os.Exit(1)
			}
			elapsed += d
			scenarios++
		}
		fmt.Printf("workers=%d adds_per_sec=%.0f\n", n, float64(adds*scenarios)/elapsed.Seconds())
	}
}
