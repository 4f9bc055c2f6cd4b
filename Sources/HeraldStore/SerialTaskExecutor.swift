import Dispatch

/// A task executor on a serial dispatch queue of its own, outside Swift's cooperative pool: the
/// SQLite writer's transactions run on it (`HeraldStore.exclusive`), so that between two
/// statements a transaction holding the writer is not queued behind the dispatcher's policy
/// step or the timer loop's rendering, which run for tens of milliseconds each without a
/// suspension on a pool as wide as the cores. The kernel shares the cores between its thread and
/// the pool's; the writer is held only for the work of its transaction.
final class SerialTaskExecutor: TaskExecutor {
    private let queue: DispatchQueue

    init(label: String) {
        queue = DispatchQueue(label: label, qos: .userInitiated)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }
}
