import NIOPosix

/// A task executor outside Swift's cooperative pool: the SQLite writer's transactions run on it
/// (`HeraldStore.exclusive`), so that between two statements a transaction holding the writer is
/// not queued behind the dispatcher's policy step or the timer loop's rendering, which run for
/// tens of milliseconds each without a suspension on a pool as wide as the cores.
///
/// Its jobs run on `threadPool` (the writer connection's own, of one thread), the thread that
/// runs the writer's statements: a statement and the code of the transaction around it take
/// turns on one thread instead of waking another for each statement and being woken back (on two
/// busy cores each wake-up could wait for a core, and the writer was held meanwhile).
final class SerialTaskExecutor: TaskExecutor {
    let threadPool: NIOThreadPool

    init(threadPool: NIOThreadPool) {
        self.threadPool = threadPool
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        // A pool that stopped runs the job at once, here: a job is never dropped.
        threadPool.submit { _ in job.runSynchronously(on: executor) }
    }
}
