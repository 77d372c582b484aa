// Command bench measures both operators on the local control plane (kwok
// nodes, the celld stand-in on every member Pod IP, both operators as
// processes under their charts' RBAC) and writes one result per run to
// bench/results/<UTC timestamp>.{json,md}; with -readme it rewrites the
// summary block of README.md from the newest result, and with -sizing the
// sizing table of docs/install.md. The scenarios, the
// sampling and the report are the library e2e/benchmark; see docs/benchmark.md.
//
//	cd e2e && go run ./bench                         # N = 30,300,1000; mesh 10,300,1000 namespaces
//	cd e2e && go run ./bench -n 30 -mesh 10          # a short run
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ericdev/fleetmesh/e2e/benchmark"
	"github.com/ericdev/fleetmesh/e2e/cluster"
)

var (
	flagN        = flag.String("n", envOr("BENCH_N", "30,300,1000"), "comma-separated fleet counts (>= 10); empty for none")
	flagMesh     = flag.String("mesh", envOr("BENCH_MESH", "10,300,1000"), "comma-separated namespace counts the mesh operator enrolls (>= 1); empty for none")
	flagOut      = flag.String("out", "", "results directory (default <repo>/bench/results)")
	flagReadme   = flag.String("readme", "", "rewrite the bench block of this README from the newest result in -out")
	flagNoRun    = flag.Bool("readme-only", false, "only rewrite -readme (and -sizing) from the newest result in -out; run nothing")
	flagSizing   = flag.String("sizing", "", "rewrite the sizing table of this document (docs/install.md) from the newest results in -out")
	flagSteady   = flag.Duration("steady", 3*benchmark.StateInterval+5*time.Second, "steady-state window after poking every fleet")
	flagMetrics  = flag.String("metrics-addr", os.Getenv("BENCH_METRICS_ADDR"), "loopback address for the fleet operator's metrics (default: a free port)")
	flagSkip     = flag.Int("skip-nodes", 0, "cordon the first kwok nodes of each bed (beds lease disjoint Pod ranges, so this is no longer needed)")
	flagKeep     = flag.Bool("keep", os.Getenv("BENCH_KEEP") != "", "keep each bed's files (operator logs) after a successful N")
	flagTimeout  = flag.Duration("timeout", benchmark.DefaultTimeout, "per-phase wait limit")
	flagPprof    = flag.Bool("pprof", false, "serve both operators' net/http/pprof on free loopback ports (logged per bed), to profile them while a run goes on")
	flagTimeline = flag.Bool("timeline", false, "log every 10 s, per namespace prefix (bench, floor, pfloor, qfloor), how many StatefulSets the StatefulSet controller observed, claims are bound, and member Pods are scheduled and Ready: where a convergence waits")
	flagNoFloor  = flag.Bool("no-floors", false, "skip both fleet floors: re-measures the operator's own phases (convergence, steady state, reaction, cold restart, memory) in half the time, without the convergence ratios")
	flagRepeat   = flag.Int("mesh-repeat", envInt("BENCH_MESH_REPEAT", 1), "runs of each mesh namespace count, each in a fresh bed; the mesh target is judged on the median ratio")
	flagNRepeat  = flag.Int("n-repeat", envInt("BENCH_N_REPEAT", 1), "runs of each fleet count, each in a fresh bed; the largest N's timing targets are judged on the median of 3 or more")
)

func envOr(k, def string) string {
	// Set but empty means none (BENCH_N= runs no fleets), as the flags say.
	if v, ok := os.LookupEnv(k); ok {
		return v
	}
	return def
}

func main() {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	benchmark.StopOnSignal()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	out := *flagOut
	if out == "" {
		out = filepath.Join(root, "bench", "results")
	}
	if *flagNoRun {
		if *flagReadme == "" {
			return fmt.Errorf("-readme-only needs -readme")
		}
		if err := benchmark.UpdateReadme(*flagReadme, out); err != nil {
			return err
		}
		if *flagSizing != "" {
			return benchmark.UpdateSizing(*flagSizing, out)
		}
		return nil
	}
	o := benchmark.Options{Steady: *flagSteady, Keep: *flagKeep, Log: os.Stderr, Probes: true, NoFloors: *flagNoFloor, MeshRepeat: *flagRepeat, NRepeat: *flagNRepeat,
		Timeout: *flagTimeout, Timeline: *flagTimeline, Pprof: *flagPprof, MetricsAddr: *flagMetrics, SkipNodes: *flagSkip}
	if o.N, err = benchmark.ParseCounts(*flagN, 10); err != nil {
		return err
	}
	if o.Mesh, err = benchmark.ParseCounts(*flagMesh, 1); err != nil {
		return err
	}
	started := time.Now().UTC()
	r, err := benchmark.Execute(root, o, func(r *benchmark.Run) error { return benchmark.Write(out, started, r) })
	if r != nil {
		fmt.Print(benchmark.Markdown(r))
	}
	if err != nil {
		return err
	}
	if *flagReadme != "" {
		if err := benchmark.UpdateReadme(*flagReadme, out); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%s bench: rewrote the bench block of %s\n", time.Now().UTC().Format("15:04:05"), *flagReadme)
	}
	if *flagSizing != "" {
		if err := benchmark.UpdateSizing(*flagSizing, out); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%s bench: rewrote the sizing table of %s\n", time.Now().UTC().Format("15:04:05"), *flagSizing)
	}
	return benchmark.Failed(r)
}

// envInt is the integer in environment variable k, def when unset or not one.
func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}
