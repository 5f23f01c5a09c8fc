package manifesttest

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	kedascaledjob "github.com/kedacore/keda/v2/pkg/scaling/scaledjob"
	"github.com/sethvargo/go-envconfig"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/metrics/pkg/apis/external_metrics"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/runtime"
)

// jobStartMargin is what a Job's activeDeadlineSeconds must leave beyond the worker's
// own time: the deadline counts from the Job's start, so it includes scheduling the
// pod and pulling the image on a cold node.
const jobStartMargin = 5 * time.Minute

// scaledJob is one ScaledJob of a build with its worker pod and the worker's config.
type scaledJob struct {
	o    object
	sj   *kedav1alpha1.ScaledJob
	pod  podRef
	env  map[string]string
	cfg  runtime.Config
	trig kedav1alpha1.ScaleTriggers
}

// scaledJobs returns every ScaledJob of every build, resolved; it fails the test when
// there is none.
func scaledJobs(t *testing.T) []scaledJob {
	t.Helper()
	var out []scaledJob
	for _, dir := range kustomizations(t) {
		objs := build(t, dir)
		for _, o := range find(objs, "ScaledJob", "") {
			sj := o.value.(*kedav1alpha1.ScaledJob)
			if sj.Spec.JobTargetRef == nil {
				t.Fatalf("%v: no jobTargetRef", o)
			}
			tmpl := &sj.Spec.JobTargetRef.Template
			p := podRef{o.String(), o.namespace, &tmpl.Spec, tmpl.Labels}
			env := effectiveEnv(t, objs, p, p.container(t))
			out = append(out, scaledJob{o: o, sj: sj, pod: p, env: env, cfg: workerConfig(t, p.what, env),
				trig: externalTrigger(t, o.String(), sj.Spec.Triggers)})
		}
	}
	if len(out) == 0 {
		t.Fatal("no ScaledJob in any build")
	}
	return out
}

var quietKEDALog sync.Once

// TestScaledJobs: each ScaledJob passes KEDA's own admission validation, polls an
// "external" trigger that watches the queues its workers serve with one task per Job,
// and its Jobs end by themselves and are bounded: the worker exits after its tasks
// (DTQ_WORKER_MAX_TASKS) or when idle (DTQ_WORKER_IDLE_EXIT_S), the pod is not
// restarted in place, activeDeadlineSeconds leaves the task its whole time limit, and
// changing the ScaledJob does not delete running Jobs. (TestWorkerPods checks the pod
// itself: locked down, probes, grace period over the drain.)
func TestScaledJobs(t *testing.T) {
	t.Parallel()
	// KEDA's webhook code logs through controller-runtime, which complains on stderr
	// when no logger was set.
	quietKEDALog.Do(func() { ctrllog.SetLogger(logr.Discard()) })
	for _, j := range scaledJobs(t) {
		o, sj, cfg := j.o, j.sj, j.cfg
		dryRun := true
		if _, err := sj.ValidateCreate(&dryRun); err != nil {
			t.Errorf("%v: KEDA's ScaledJob webhook rejects it: %v", o, err)
		}
		if err := kedav1alpha1.ValidateTriggers(sj.Spec.Triggers); err != nil {
			t.Errorf("%v: KEDA ValidateTriggers: %v", o, err)
		}

		// KEDA runs external-push triggers of a ScaledJob but drops what they push
		// (pkg/scaling/scale_handler.go: "External Push Scaler does not support
		// ScaledJob"); the poll is what starts Jobs.
		if j.trig.Type != "external" {
			t.Errorf("%v: trigger type %q, want external (KEDA ignores pushes for ScaledJobs)", o, j.trig.Type)
		}
		checkTriggerMatchesWorker(t, o, j.trig, cfg, build(t, dirOf(t, o)))

		if sj.Spec.MinReplicaCount != nil && *sj.Spec.MinReplicaCount != 0 {
			t.Errorf("%v: minReplicaCount %d: idle Jobs would wait for work that is not there, then exit and be replaced", o, *sj.Spec.MinReplicaCount)
		}
		if sj.Spec.MaxReplicaCount == nil {
			t.Errorf("%v: no maxReplicaCount (KEDA's default is 100 Jobs)", o)
		}
		if sj.Spec.RolloutStrategy != "" || sj.Spec.Rollout.Strategy != "gradual" { //nolint:staticcheck // the deprecated field must stay empty
			t.Errorf("%v: rollout strategy %q/%q, want rollout.strategy gradual: KEDA's default deletes running Jobs when the ScaledJob changes", o, sj.Spec.RolloutStrategy, sj.Spec.Rollout.Strategy) //nolint:staticcheck
		}
		if ss := sj.Spec.ScalingStrategy; len(ss.PendingPodConditions) > 0 && ss.Strategy != "accurate" && ss.Strategy != "eager" {
			t.Errorf("%v: pendingPodConditions with strategy %q, which does not read them", o, ss.Strategy)
		}

		job := sj.Spec.JobTargetRef
		checkJobSpec(t, o, job)

		// The worker's exits, and the deadline that must not cut its task.
		if cfg.MaxTasks <= 0 {
			t.Errorf("%v: DTQ_WORKER_MAX_TASKS unset: a Job's worker would keep taking tasks until activeDeadlineSeconds cuts one short", o)
		}
		if cfg.IdleExit <= 0 {
			t.Errorf("%v: DTQ_WORKER_IDLE_EXIT_S unset: a Job that finds no task would never end", o)
		}
		if cfg.MaxTasks > 0 && int64(cfg.Concurrency) > cfg.MaxTasks {
			t.Errorf("%v: DTQ_WORKER_CONCURRENCY %d > DTQ_WORKER_MAX_TASKS %d: slots that never run a task (and the trigger's target counts them)", o, cfg.Concurrency, cfg.MaxTasks)
		}
		// A Job started for a due retry or delayed task must outlive the scheduler lock
		// an exited worker may still hold, or it leaves before it moves the task.
		if lock := cfg.SchedulerLockTTL + cfg.SchedulerInterval; cfg.IdleExit > 0 && cfg.IdleExit <= lock {
			t.Errorf("%v: DTQ_WORKER_IDLE_EXIT_S %v <= the scheduler lock TTL plus a pass (%v)", o, cfg.IdleExit, lock)
		}
		if cfg.DefaultTimeout <= 0 {
			t.Errorf("%v: DTQ_DEFAULT_TIMEOUT_S 0: a task without its own timeout would run until activeDeadlineSeconds", o)
		}
		// A worker that reached DTQ_WORKER_MAX_TASKS drains under DTQ_DRAIN_TIMEOUT_S, and
		// with its last task just started, that deadline must outlast the task's time
		// limit or the worker cancels the task itself (TestScaledJobWorkerFinishesItsTask
		// shows it on a running worker).
		if cfg.MaxTasks > 0 && cfg.DefaultTimeout > 0 && cfg.DrainTimeout < cfg.DefaultTimeout+k8sDrainMargin {
			t.Errorf("%v: DTQ_DRAIN_TIMEOUT_S %v < DTQ_DEFAULT_TIMEOUT_S %v + %v: a Job's worker, draining from its last task's start, would cancel that task", o, cfg.DrainTimeout, cfg.DefaultTimeout, k8sDrainMargin)
		}
		if cfg.MaxTasks > 0 && job.ActiveDeadlineSeconds != nil {
			rounds := (cfg.MaxTasks + int64(cfg.Concurrency) - 1) / int64(cfg.Concurrency)
			need := time.Duration(rounds)*(cfg.IdleExit+cfg.DefaultTimeout) + jobStartMargin
			if got := time.Duration(*job.ActiveDeadlineSeconds) * time.Second; got < need {
				t.Errorf("%v: activeDeadlineSeconds %v < %d × (DTQ_WORKER_IDLE_EXIT_S %v + DTQ_DEFAULT_TIMEOUT_S %v) + %v: the deadline would cut a task within its time limit", o, got, rounds, cfg.IdleExit, cfg.DefaultTimeout, jobStartMargin)
			}
		}
	}
}

// checkJobSpec: one pod per Job, never restarted in place, a bounded number of pod
// retries and a deadline, and a podFailurePolicy that names the container.
func checkJobSpec(t *testing.T, o object, job *batchv1.JobSpec) {
	t.Helper()
	if p := job.Parallelism; p != nil && *p != 1 {
		t.Errorf("%v: parallelism %d: KEDA counts Jobs, one worker each", o, *p)
	}
	if c := job.Completions; c != nil && *c != 1 {
		t.Errorf("%v: completions %d: a Job is done when its worker exits 0", o, *c)
	}
	if rp := job.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever {
		t.Errorf("%v: restartPolicy %q, want Never (KEDA would set OnFailure, and podFailurePolicy needs Never)", o, rp)
	}
	if job.BackoffLimit == nil {
		t.Errorf("%v: no backoffLimit (the default retries a failing worker 6 times)", o)
	}
	if job.ActiveDeadlineSeconds == nil {
		t.Errorf("%v: no activeDeadlineSeconds: a stuck Job would hold its slot of maxReplicaCount forever", o)
	}
	// Exits no retry can mend fail the Job at once: 2 (configuration) and 3 (Redis
	// refuses the worker).
	fails := map[int32]bool{}
	if pfp := job.PodFailurePolicy; pfp != nil {
		for _, r := range pfp.Rules {
			if r.Action == batchv1.PodFailurePolicyActionFailJob && r.OnExitCodes != nil && r.OnExitCodes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn {
				for _, v := range r.OnExitCodes.Values {
					fails[v] = true
				}
			}
		}
	}
	for _, code := range []int32{2, 3} {
		if !fails[code] {
			t.Errorf("%v: exit %d does not fail the Job at once (podFailurePolicy FailJob): the pod would be retried for nothing", o, code)
		}
	}
	if pfp := job.PodFailurePolicy; pfp != nil {
		for i, r := range pfp.Rules {
			if r.OnExitCodes == nil || r.OnExitCodes.ContainerName == nil {
				continue
			}
			found := false
			for _, c := range job.Template.Spec.Containers {
				found = found || c.Name == *r.OnExitCodes.ContainerName
			}
			if !found {
				t.Errorf("%v: podFailurePolicy rule %d names container %q, which the pod does not have", o, i, *r.OnExitCodes.ContainerName)
			}
		}
	}
}

// dirOf returns the kustomization directory whose build o came from.
func dirOf(t *testing.T, o object) string {
	t.Helper()
	dir, ok := strings.CutPrefix(o.source, "kustomize build ")
	if !ok {
		t.Fatalf("%v: not from a build", o)
	}
	return dir
}

// jobEnv returns a copy of a ScaledJob worker's environment for an in-test worker: the
// test's Redis, and a pod name of its own as the kubelet would give each Job's pod.
func jobEnv(j scaledJob, redisURL string, n int) map[string]string {
	env := mapsClone(j.env)
	env["DTQ_REDIS_URL"] = redisURL
	env["DTQ_WORKER_ID"] = fmt.Sprintf("%s-%d-x2x4q", j.sj.Name, n)
	return env
}

func loadWorker(t *testing.T, what string, env map[string]string) runtime.Config {
	t.Helper()
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(env))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return cfg
}

// jobWorker is a worker run as a Job's container: Run returning is the process exiting.
type jobWorker struct {
	cancel context.CancelFunc // SIGTERM
	done   chan error         // Run's result, once it returned
}

func runJobWorker(t *testing.T, cfg runtime.Config, j scaledJob, ls liveScaler, reg *runtime.Registry) jobWorker {
	t.Helper()
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: ls.rdb, Registry: reg})
	if err != nil {
		t.Fatalf("%v: %v", j.o, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("%v: a worker did not stop within 30 s of its context ending", j.o)
		}
	})
	return jobWorker{cancel: cancel, done: done}
}

// exited waits for the worker to exit by itself (Run returning nil, exit status 0).
func (w jobWorker) exited(t *testing.T, what string, within time.Duration) {
	t.Helper()
	select {
	case err := <-w.done:
		if err != nil {
			t.Fatalf("%s: the worker exited with %v", what, err)
		}
		w.done <- nil // for the cleanup
	case <-time.After(within):
		t.Fatalf("%s: the worker did not exit by itself within %v", what, within)
	}
}

// task reads a task's record.
func task(t *testing.T, cl *client.Client, queue, id string) *client.TaskInfo {
	t.Helper()
	ti, err := cl.Get(context.Background(), queue, id)
	if err != nil {
		t.Fatalf("task %s: %v", id, err)
	}
	return ti
}

// TestScaledJobWorkerFinishesItsTask runs a ScaledJob's worker as the Job runs it, with
// the manifest's environment, on a real redis-server, with its three task-length
// timings (DTQ_DEFAULT_TIMEOUT_S, DTQ_DRAIN_TIMEOUT_S, DTQ_WORKER_IDLE_EXIT_S) scaled
// down together so the task time limit is 2 s. A task that runs for 90% of its time
// limit must finish on its first attempt and the worker then exit 0 by itself, leaving
// the next task queued for the next Job; a Job that finds no task must exit 0 by itself.
func TestScaledJobWorkerFinishesItsTask(t *testing.T) {
	t.Parallel()
	for _, j := range scaledJobs(t) {
		if j.cfg.DefaultTimeout <= 0 {
			t.Fatalf("%v: no DTQ_DEFAULT_TIMEOUT_S to scale the task to (TestScaledJobs says why it needs one)", j.o)
		}
		ls := startScalerFor(t, dirOf(t, j.o), nil)
		limit := 2 * time.Second
		scale := limit.Seconds() / j.cfg.DefaultTimeout.Seconds()
		queue := j.cfg.Queues[0]

		var mu sync.Mutex
		attempts := map[string]int{}
		reg := runtime.NewRegistry()
		reg.Register("long", func(ctx context.Context, tk *runtime.Task) ([]byte, error) {
			mu.Lock()
			attempts[tk.ID]++
			mu.Unlock()
			select {
			case <-time.After(limit * 9 / 10):
				return []byte("done"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}, runtime.FuncOptions{})

		var ids []string
		for range 2 {
			id, _, err := ls.cl.Enqueue(context.Background(), client.Task{Queue: queue, Function: "long"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		newJob := func(n int) jobWorker {
			env := jobEnv(j, ls.redisURL, n)
			for _, v := range []string{"DTQ_DEFAULT_TIMEOUT_S", "DTQ_DRAIN_TIMEOUT_S", "DTQ_WORKER_IDLE_EXIT_S"} {
				if _, set := env[v]; !set {
					continue // the default (TestScaledJobs checks which must be set)
				}
				f, err := strconv.ParseFloat(env[v], 64)
				if err != nil {
					t.Fatalf("%v: %s=%q: %v", j.o, v, env[v], err)
				}
				env[v] = strconv.FormatFloat(f*scale, 'f', -1, 64)
			}
			return runJobWorker(t, loadWorker(t, j.pod.what, env), j, ls, reg)
		}

		// The first Job runs one task to the end and exits.
		newJob(1).exited(t, fmt.Sprintf("%v: the first Job", j.o), limit+10*time.Second)
		first, second := task(t, ls.cl, queue, ids[0]), task(t, ls.cl, queue, ids[1])
		if first.Status != "succeeded" || first.Attempt != 1 {
			t.Fatalf("%v: the first Job's task is %s after %d attempts, want succeeded on the first: a worker that reached DTQ_WORKER_MAX_TASKS drains under DTQ_DRAIN_TIMEOUT_S (%v), which must cover its task",
				j.o, first.Status, first.Attempt, j.cfg.DrainTimeout)
		}
		if second.Status != "queued" {
			t.Fatalf("%v: the first Job also took the second task (%s): want one task per Job", j.o, second.Status)
		}
		// The next Job takes the next task.
		newJob(2).exited(t, fmt.Sprintf("%v: the second Job", j.o), limit+10*time.Second)
		if ti := task(t, ls.cl, queue, ids[1]); ti.Status != "succeeded" {
			t.Fatalf("%v: the second Job left its task %s", j.o, ti.Status)
		}
		// A Job with nothing to do ends.
		newJob(3).exited(t, fmt.Sprintf("%v: a Job with an empty queue", j.o), time.Duration(float64(j.cfg.IdleExit)*scale)+10*time.Second)
		mu.Lock()
		if attempts[ids[0]] != 1 || attempts[ids[1]] != 1 {
			t.Errorf("%v: function runs per task %v, want one each", j.o, attempts)
		}
		mu.Unlock()
	}
}

// TestScaledJobStartsOneJobPerWaitingTask checks the ScaledJob's scalingStrategy and
// trigger metadata (includePending above all) together, with KEDA's own arithmetic
// against the real scaler on a real redis-server, and real workers running as its Jobs
// with the manifest's environment. At each state, the Jobs KEDA starts at one poll must
// be the tasks nobody will otherwise run:
//
//  1. three tasks wait, no Job: 3;
//  2. the same, one Job created whose pod is not running yet: 2;
//  3. that Job's worker runs one task, two wait: 2;
//  4. that Job is gone (evicted; its drain ran out and it handed its task back, which
//     leaves the task pending, where only a new worker's reaper takes it): 3;
//  5. those three Jobs run (their workers with the manifest's environment), every task
//     succeeds and every worker exits 0 by itself: then 0, and the trigger is inactive.
func TestScaledJobStartsOneJobPerWaitingTask(t *testing.T) {
	t.Parallel()
	for _, j := range scaledJobs(t) {
		// The scaler answers from a fresh read each time (the cache would hold the
		// previous state for up to DTQ_SCALER_CACHE_TTL_MS; it changes no count).
		ls := startScalerFor(t, dirOf(t, j.o), map[string]string{"DTQ_SCALER_CACHE_TTL_MS": "0"})
		conn, err := grpc.NewClient(ls.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		keda := kedaPoller{t: t, es: pb.NewExternalScalerClient(conn), sj: j.sj, trig: j.trig}
		queue := j.cfg.Queues[0]

		release := make(chan struct{})
		var runs atomic.Int64
		reg := runtime.NewRegistry()
		reg.Register("long", func(ctx context.Context, _ *runtime.Task) ([]byte, error) {
			runs.Add(1)
			select {
			case <-release:
				return []byte("done"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}, runtime.FuncOptions{})
		var ids []string
		for range 3 {
			id, _, err := ls.cl.Enqueue(context.Background(), client.Task{Queue: queue, Function: "long"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}

		keda.want("1. three tasks wait, no Job", 0, 0, 3)
		keda.want("2. three tasks wait, one Job whose pod is starting", 1, 1, 2)

		// 3. A Job's worker takes one task. Its drain is cut to 5 s: step 4 is an
		// eviction whose drain ran out (the manifest's would outlast the test).
		env := jobEnv(j, ls.redisURL, 1)
		env["DTQ_DRAIN_TIMEOUT_S"] = "5"
		evicted := runJobWorker(t, loadWorker(t, j.pod.what, env), j, ls, reg)
		deadline := time.Now().Add(10 * time.Second)
		for runs.Load() < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%v: the Job's worker started no task in 10 s", j.o)
			}
			time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
		}
		keda.want("3. one Job runs a task, two wait", 1, 0, 2)

		// 4. The Job is evicted: SIGTERM, the drain runs out, the task is handed back.
		evicted.cancel()
		evicted.exited(t, fmt.Sprintf("%v: the evicted Job", j.o), 20*time.Second)
		keda.want("4. two wait, one handed back, no Job", 0, 0, 3)

		// 5. The Jobs KEDA starts run everything and end. Their idle exit is cut to 1 s
		// (a Job that another took the task from waits that long, not a minute).
		close(release)
		var jobs []jobWorker
		for n := range 3 {
			env := jobEnv(j, ls.redisURL, 10+n)
			env["DTQ_WORKER_IDLE_EXIT_S"] = "1"
			jobs = append(jobs, runJobWorker(t, loadWorker(t, j.pod.what, env), j, ls, reg))
		}
		for n, w := range jobs {
			w.exited(t, fmt.Sprintf("%v: Job %d of step 5", j.o, n), 30*time.Second)
		}
		for _, id := range ids {
			if ti := task(t, ls.cl, queue, id); ti.Status != "succeeded" {
				t.Errorf("%v: task %s %s", j.o, id, ti.Status)
			}
		}
		if n := keda.newJobs(0, 0); n != 0 {
			t.Errorf("%v: with every task done KEDA would start %d Jobs", j.o, n)
		}
	}
}

// kedaPoller computes what one poll of KEDA v2.21 does for a ScaledJob with an external
// trigger: the scaler answers over gRPC as it does to KEDA's external scaler; the
// queue length and activity come from KEDA's own code (pkg/scaling/scaledjob, as
// scale_handler.go's getScaledJobMetrics calls it); the strategy arithmetic is that of
// pkg/scaling/executor/scale_jobs.go (getScalingDecision, GetEffectiveMaxScale,
// createJobs), copied because that package needs all of KEDA's secret resolvers to build.
type kedaPoller struct {
	t    *testing.T
	es   pb.ExternalScalerClient
	sj   *kedav1alpha1.ScaledJob
	trig kedav1alpha1.ScaleTriggers
}

// want checks the Jobs one poll starts, given the Jobs KEDA lists: running (not
// finished) and, of those, pending (no pod running yet).
func (k kedaPoller) want(state string, running, pending, want int64) {
	k.t.Helper()
	if got := k.newJobs(running, pending); got != want {
		ss := k.sj.Spec.ScalingStrategy
		k.t.Errorf("ScaledJob %s, %s: KEDA would start %d Jobs, want %d (scalingStrategy %q, includePending %q)",
			k.sj.Name, state, got, want, ss.Strategy, k.trig.Metadata["includePending"])
	}
}

func (k kedaPoller) newJobs(running, pending int64) int64 {
	t := k.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const triggerIndex = 0
	ref := &pb.ScaledObjectRef{Name: k.sj.Name, Namespace: k.sj.Namespace, ScalerMetadata: k.trig.Metadata}
	spec, err := k.es.GetMetricSpec(ctx, ref)
	if err != nil {
		t.Fatalf("ScaledJob %s: GetMetricSpec: %v", k.sj.Name, err)
	}
	// external_scaler.go buildMetricSpecs: "s<trigger index>-" names, AverageValue targets.
	var specs []autoscalingv2.MetricSpec
	for _, s := range spec.MetricSpecs {
		target := resource.NewQuantity(s.TargetSize, resource.DecimalSI)
		if s.TargetSizeFloat > 0 {
			target = resource.NewMilliQuantity(int64(s.TargetSizeFloat*1000), resource.DecimalSI)
		}
		specs = append(specs, autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: fmt.Sprintf("s%d-%s", triggerIndex, s.MetricName)},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: target},
		}})
	}
	var perScaler []kedascaledjob.ScalerMetrics
	isActive := false
	for _, s := range specs {
		// external_scaler.go GetMetricsAndActivity: GetMetrics without the prefix, then IsActive.
		name := s.External.Metric.Name
		resp, err := k.es.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref, MetricName: strings.TrimPrefix(name, fmt.Sprintf("s%d-", triggerIndex))})
		if err != nil {
			t.Fatalf("ScaledJob %s: GetMetrics %s: %v", k.sj.Name, name, err)
		}
		var metrics []external_metrics.ExternalMetricValue
		for _, v := range resp.MetricValues {
			f := float64(v.MetricValue)
			if v.MetricValueFloat > 0 {
				f = v.MetricValueFloat
			}
			metrics = append(metrics, external_metrics.ExternalMetricValue{MetricName: name, Value: *resource.NewMilliQuantity(int64(math.Round(f*1000)), resource.DecimalSI)})
		}
		active, err := k.es.IsActive(ctx, ref)
		if err != nil {
			t.Fatalf("ScaledJob %s: IsActive: %v", k.sj.Name, err)
		}
		isActive = isActive || active.Result
		queueLength, maxValue, _ := kedascaledjob.CalculateQueueLengthAndMaxValue(metrics, specs, k.sj.MaxReplicaCount())
		perScaler = append(perScaler, kedascaledjob.ScalerMetrics{QueueLength: queueLength, MaxValue: maxValue, IsActive: isActive})
	}
	active, scaleTo, maxScale, _ := kedascaledjob.IsScaledJobActive(perScaler, k.sj.Spec.ScalingStrategy.MultipleScalersCalculation, k.sj.MinReplicaCount(), k.sj.MaxReplicaCount())

	// getScalingDecision
	var effectiveMaxScale int64
	minReplicas := k.sj.MinReplicaCount()
	if running < minReplicas {
		scaleTo = minReplicas - running
		effectiveMaxScale = scaleTo
	} else {
		effectiveMaxScale, scaleTo = k.effectiveMaxScale(maxScale, running-minReplicas, pending, k.sj.MaxReplicaCount(), scaleTo)
	}
	effectiveMaxScale = max(effectiveMaxScale, 0)
	// RequestJobScale → createJobs
	if !active || effectiveMaxScale <= 0 {
		return 0
	}
	return min(scaleTo, effectiveMaxScale)
}

// effectiveMaxScale is NewScalingStrategy(...).GetEffectiveMaxScale.
func (k kedaPoller) effectiveMaxScale(maxScale, running, pending, maxReplicas, scaleTo int64) (int64, int64) {
	ss := k.sj.Spec.ScalingStrategy
	switch ss.Strategy {
	case "custom":
		pct, err := strconv.ParseFloat(ss.CustomScalingRunningJobPercentage, 64)
		if err != nil {
			break // KEDA falls back to default
		}
		var deduction int64
		if ss.CustomScalingQueueLengthDeduction != nil {
			deduction = int64(*ss.CustomScalingQueueLengthDeduction)
		}
		return min(maxScale-deduction-int64(float64(running)*pct), maxReplicas), scaleTo
	case "accurate":
		if maxScale+running-pending > maxReplicas {
			return maxReplicas - running, scaleTo
		}
		return maxScale - pending, scaleTo
	case "eager":
		return min(maxReplicas-running-pending, maxScale), maxReplicas
	}
	return maxScale - running, scaleTo
}
