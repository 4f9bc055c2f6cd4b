import Dispatch
import NIOPosix

/// A task executor outside Swift's cooperative pool: the SQLite writer's transactions run on it
/// (`HeraldStore.exclusive`), so that between two statements a transaction holding the writer is
/// not queued behind the dispatcher's policy step or the timer loop's rendering, which run for
/// tens of milliseconds each without a suspension on a pool as wide as the cores.
///
/// With a `threadPool` (SQLite: the writer connection's own, of one thread) its jobs run on the
/// thread that runs the writer's statements: a statement and the code of the transaction around
/// it take turns on one thread instead of waking another for each statement and being woken
/// back (on two busy cores each wake-up could wait for a core, and the writer was held meanwhile).
/// Without one, on a serial dispatch queue of its own.
final class SerialTaskExecutor: TaskExecutor {
    private enum Runner {
        case queue(DispatchQueue)
        case threadPool(NIOThreadPool)
    }

    private let runner: Runner

    init(label: String, threadPool: NIOThreadPool? = nil) {
        runner = threadPool.map(Runner.threadPool) ?? .queue(DispatchQueue(label: label, qos: .userInitiated))
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        switch runner {
        case .queue(let queue):
            queue.async { job.runSynchronously(on: executor) }
        case .threadPool(let threadPool):
            // A pool that stopped runs the job at once, here: a job is never dropped.
            threadPool.submit { _ in job.runSynchronously(on: executor) }
        }
    }
}
