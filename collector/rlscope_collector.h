/* The collector's public C ABI (the only symbols it exports besides the NVTX
 * and CUDA injection entry points). Every function is safe to call from any
 * thread at any time: before init, when the collector is disabled, or after
 * shutdown they do nothing and return 0. None of them blocks except
 * rlscope_flush (bounded by its timeout) and rlscope_collector_shutdown
 * (bounded by flush.exit_timeout_ms). */
#ifndef RLSCOPE_COLLECTOR_H_
#define RLSCOPE_COLLECTOR_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RLSCOPE_API __attribute__((visibility("default")))

/* Starts the collector from the environment (RLSCOPE_AGGREGATOR,
 * RLSCOPE_CONFIG, RLSCOPE_RANK/RANK, RLSCOPE_ROLE). Idempotent. Returns 1 when
 * a collector runs in this process, 0 when profiling is off or failed (the
 * reason is printed once to stderr). */
RLSCOPE_API int rlscope_collector_init(void);
/* 1 when events are being recorded right now. */
RLSCOPE_API int rlscope_collector_armed(void);
/* 1 when a collector runs in this process (armed or not): a load and a
 * compare, for bindings that skip all work without one. */
RLSCOPE_API int rlscope_collector_running(void);

RLSCOPE_API void rlscope_range_push(const char* name);
/* The same with a name interned once (for bindings that cannot keep a
 * stable `const char*`): rlscope_intern returns its id, 0 when no collector
 * runs. */
RLSCOPE_API uint32_t rlscope_intern(const char* name);
RLSCOPE_API void rlscope_range_push_id(uint32_t name_id);
RLSCOPE_API uint64_t rlscope_range_start_id(uint32_t name_id);
RLSCOPE_API void rlscope_mark_id(uint32_t name_id);
/* With an integer payload (shown as args.payload; the aggregator uses the
 * Ray bootstrap's "ray.submit"/"ray.task"/"ray.got" marks and task payloads
 * on method ranges for its clock causality check). */
RLSCOPE_API void rlscope_range_push_payload(uint32_t name_id, uint64_t payload);
RLSCOPE_API void rlscope_mark_payload(uint32_t name_id, uint64_t payload);
RLSCOPE_API void rlscope_range_pop(void);
/* The `nvtx` package's calls through rlscope's own entry points for them
 * (rlscope_ray/nvtx_fast.py): each records what the NVTX handler records
 * for the same call (ids as DomainCreateA / DomainRegisterStringA give them:
 * rlscope_intern of the name; domain 0 is the default domain), with `flags`
 * (kFlagViaNvtxFast or kFlagViaNvtxAnnotate, event.h; kFlagHasPayload with
 * `payload`). Not gated by cpu.python_api: they are NVTX events. */
RLSCOPE_API void rlscope_nvtx_push(uint32_t name_id, uint32_t domain_id, uint32_t category, uint64_t payload,
                                   uint8_t flags);
RLSCOPE_API void rlscope_nvtx_pop(uint32_t domain_id, uint8_t flags);
RLSCOPE_API uint64_t rlscope_nvtx_start(uint32_t name_id, uint32_t domain_id, uint32_t category, uint64_t payload,
                                        uint8_t flags);
RLSCOPE_API void rlscope_nvtx_end(uint32_t domain_id, uint64_t handle, uint8_t flags);
RLSCOPE_API void rlscope_nvtx_mark(uint32_t name_id, uint32_t domain_id, uint32_t category, uint64_t payload,
                                   uint8_t flags);
/* The idle lanes of the pushes and pops above (nvtx and rlscope ranges
 * alike), for callers that would read arguments first: while the process
 * neither records nor watches (disarmed), a push or a pop does nothing on
 * the calling thread but keep its depth (so pairs stay whole across an
 * arming edge), and these do that and return 1. 0: take the full call
 * (armed, watching, or the pop of an open that was recorded or dropped).
 * rlscope_recording_idle: whether a start or a mark would record nothing now
 * (a start returns 0). A thread in rlscope_scratch_scope (a start-up
 * calibration) is never idle: its loops take the full call. */
RLSCOPE_API int rlscope_push_idle(void);
RLSCOPE_API int rlscope_pop_idle(void);
RLSCOPE_API int rlscope_recording_idle(void);
RLSCOPE_API uint64_t rlscope_range_start(const char* name);
RLSCOPE_API void rlscope_range_end(uint64_t range_id);
RLSCOPE_API void rlscope_mark(const char* name);
/* A training step on the controller: a range named "step" carrying `step`. */
RLSCOPE_API void rlscope_step_begin(int64_t step);
RLSCOPE_API void rlscope_step_end(void);
/* Makes this process the run's controller (the process whose steps drive the
 * run) unless the aggregator already named another; 1 when it is. */
RLSCOPE_API int rlscope_claim_controller(void);
/* The number of the next step that carries none (a resumed run's 201). */
RLSCOPE_API void rlscope_set_next_step(int64_t step);
/* Explicit capture (capture_range: api). */
RLSCOPE_API void rlscope_capture_start(void);
RLSCOPE_API void rlscope_capture_stop(void);
/* Ships everything recorded so far; waits up to timeout_ms for the flush
 * thread to have sent it. Returns 1 when done in time. */
RLSCOPE_API int rlscope_flush(int timeout_ms);
/* Flushes, says goodbye to the aggregator and stops. Also run at exit. */
RLSCOPE_API void rlscope_collector_shutdown(void);

/* Adds or replaces an identity label of this process (e.g. "actor_id");
 * shown in run.json and track names. Not for the hot path (takes a lock). */
RLSCOPE_API void rlscope_set_label(const char* key, const char* value);
/* Overhead correction: sets one calibrated cost, ns per event (keys in
 * docs/wire_format.md, Hello `costs`), e.g. the caller-side cost of the
 * `nvtx` Python package measured by rlscope_ray. Takes a lock. */
RLSCOPE_API void rlscope_set_cost(const char* key, double ns);
/* The calling thread works for the collector (rlscope_ray's speed watch
 * after its calibration): CPU sampling gives its time to the profiler, as
 * the collector's own threads' (from the flush thread's next look at the
 * process's threads, until the thread is gone). `name` (NULL: kept) names
 * the thread for traces, top and py-spy (at most 15 bytes are kept). No-op
 * when no collector runs. */
RLSCOPE_API void rlscope_own_thread(const char* name);
/* Re-measures the collector's own per-event costs on the calling thread
 * (about a millisecond); 0 when no collector runs. */
RLSCOPE_API int rlscope_calibrate(void);
/* 1: the calling thread records into a scratch ring nothing ships, at the
 * real costs, until 0 restores its ring (a calibration loop's events stay in
 * the process); its starts (and so their ends) record as if armed, its
 * pushes, pops and marks as the process's arming says. A thread that never
 * recorded is registered first, disarmed too, and stays so. Returns 1 when
 * the scope changed; 0 when no collector runs, the thread cannot be
 * registered (over the buffer budget), or it was already so. */
RLSCOPE_API int rlscope_scratch_scope(int on);
/* The current calibrated cost of `key`, ns per event; -1 when unknown. */
RLSCOPE_API double rlscope_cost(const char* key);
/* Controller only: the processes that should connect, `n` records of
 * "key=value" lines joined by '\n' (keys: actor_id, class_name, name,
 * node_id, pid). Replaces the previous list. */
RLSCOPE_API void rlscope_report_expected(const char* const* records, uint64_t n);

/* Cross-stack attribution (collector/cpu_sampler.h): a reader of the module
 * of the calling thread's current Python frame, called in the CPU sampler's
 * signal handler on the sampled thread. It must not lock, allocate or make a
 * system call, and reads memory that is not its own only through `read`,
 * given to it: a fault-proof copy (collector/safe_read.h) that copies n
 * bytes from src to dst and returns 1, or returns 0 when any of them cannot
 * be read (dst undefined; the sampler counts the sample's frame unread). It
 * copies the module's name (ASCII) into out[0, cap) and returns its length,
 * or 0 when there is no Python frame or it cannot be read.
 * rlscope_ray._native registers one built against the running CPython's own
 * headers; NULL unregisters it, and returns once no handler is still in the
 * one it replaces (at interpreter exit, before thread states go). `what`
 * names it (e.g. "CPython 3.11") and must stay valid. Works whether a
 * collector runs or not. */
typedef int (*rlscope_safe_read_t)(void* dst, const void* src, size_t n);
typedef size_t (*rlscope_py_module_reader_t)(rlscope_safe_read_t read, char* out, size_t cap);
RLSCOPE_API void rlscope_set_py_module_reader(rlscope_py_module_reader_t reader, const char* what);

/* Test only (collector/test_clock.h): ns the test clock of
 * RLSCOPE_TEST_COSTS advanced so far; -1 when no collector runs or it has no
 * test costs. */
RLSCOPE_API int64_t rlscope_test_clock_ns(void);

typedef struct rlscope_stats {
  uint64_t events;  /* recorded into buffers */
  uint64_t dropped; /* dropped: buffers full, or batches not sendable */
  uint64_t batches_sent;
  uint64_t batches_dropped; /* the aggregator's queue was full */
  uint64_t threads;         /* threads with a buffer now (exited ones are freed) */
} rlscope_stats_t;
RLSCOPE_API void rlscope_collector_stats(rlscope_stats_t* out);

/* The CPU sampler's counters (collector/cpu_sampler.h). A struct of its own:
 * rlscope_stats_t keeps its layout for callers built against it. */
typedef struct rlscope_sampler_stats {
  uint64_t samples; /* CPU samples recorded (cpu.sampling_hz) */
  uint64_t dropped; /* samples lost: a thread's sample ring was full */
  uint64_t signals; /* timer signals taken, recorded or not (outside a window) */
  uint64_t timers;  /* CPU-time timers that exist now (one per sampled thread) */
  uint64_t signal;  /* its signal number, 0 before it is set up */
  /* Fields are appended here, never reordered (callers are this package's). */
  uint64_t frames_unread;        /* samples whose Python frame could not be read (a read failed) */
  uint64_t kernel_reads;         /* samples whose frame was read through the kernel, not guarded loads */
  uint64_t guard_faults;         /* faults the guarded reads caught (safe_read.h) */
  double handler_ns;             /* the signal handler's own time per sample, measured in place; -1 none yet */
  uint64_t threads_unsampled;    /* threads not sampled: more at once than the sampler's slots, a timer refused */
  uint64_t walks_fp;             /* samples whose native stack was walked with frame pointers (native_stack.h) */
  uint64_t walks_scan;           /* ... by scanning the stack for return addresses */
  uint64_t walks_leaf;           /* ... to no caller (the interrupted object alone) */
  uint64_t unwalked;             /* samples whose stack was not walked (no code map yet, reads through the kernel) */
  uint64_t off_cpu_looks;        /* off-CPU looks at the recording threads (collector/thread_states.h) */
  uint64_t off_cpu_dropped;      /* off-CPU samples lost: the flush thread's ring was full */
  uint64_t walk_faults;          /* reads of native stack walks that failed (faults in guard_faults too) */
  uint64_t handlers_interrupted; /* samples whose handler took over 50 us (preempted in it): not in handler_ns */
} rlscope_sampler_stats_t;

/* The interpreter's GIL, [begin, begin + size): a thread waiting on a futex
 * there is counted as waiting for the GIL (off-CPU reasons,
 * collector/thread_states.h). rlscope_ray._native registers it; process-wide,
 * whether a collector runs or not. */
RLSCOPE_API void rlscope_set_py_gil(const void* begin, uint64_t size);
RLSCOPE_API void rlscope_sampler_stats(rlscope_sampler_stats_t* out);

#ifdef __cplusplus
}
#endif

#endif /* RLSCOPE_COLLECTOR_H_ */
