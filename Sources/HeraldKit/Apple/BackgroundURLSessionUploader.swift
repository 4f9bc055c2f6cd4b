// Apple adapter: compiles only on Apple platforms (background URLSession
// configurations do nothing elsewhere); Linux CI does not build it. The outbox decides what to
// send and retries; this only hands one request to the system and waits for its answer.
#if canImport(UserNotifications)
    public import Foundation

    /// A background `URLSession` as the `BackgroundUploader`: a quick action's commit is handed to
    /// the system, which finishes the upload even when the app is suspended right after the
    /// lock-screen tap. If the process dies first, the outbox still has the entry and sends it again
    /// at the next launch with the same idempotency key (Herald answers a replayed token with the
    /// first result). Pass the completion handler of
    /// `application(_:handleEventsForBackgroundURLSession:completionHandler:)` to `backgroundEventsFinished`.
    public final class BackgroundURLSessionUploader: NSObject, BackgroundUploader, URLSessionDataDelegate,
        @unchecked Sendable
    {
        // Mutable state is behind `lock`; URLSession calls the delegate on its own queue.
        private let baseURL: URL
        private let directory: URL
        private let lock = NSLock()
        private var session: URLSession?
        private var waiting: [Int: CheckedContinuation<HTTPResponseSpec, any Error>] = [:]
        private var received: [Int: Data] = [:]
        private var files: [Int: URL] = [:]
        private var finishedEvents: (@Sendable () -> Void)?

        public init(baseURL: URL, identifier: String = "herald.uploads") {
            self.baseURL = baseURL
            directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "herald-uploads", isDirectory: true)
            super.init()
            let configuration = URLSessionConfiguration.background(withIdentifier: identifier)
            configuration.sessionSendsLaunchEvents = true
            session = URLSession(configuration: configuration, delegate: self, delegateQueue: nil)
        }

        /// The system's handler for this session's events (from the app delegate), called once they are delivered.
        public func backgroundEventsFinished(_ handler: @escaping @Sendable () -> Void) {
            lock.withLock { finishedEvents = handler }
        }

        public func upload(_ request: HTTPRequestSpec) async throws -> HTTPResponseSpec {
            guard let session, let url = URL(string: request.path, relativeTo: baseURL) else { throw URLError(.badURL) }
            var urlRequest = URLRequest(url: url)
            urlRequest.httpMethod = request.method
            for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
            // A background session uploads from a file only.
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let file = directory.appendingPathComponent(UUID().uuidString)
            try (request.body ?? Data()).write(to: file)
            let task = session.uploadTask(with: urlRequest, fromFile: file)
            return try await withCheckedThrowingContinuation { continuation in
                lock.withLock {
                    waiting[task.taskIdentifier] = continuation
                    files[task.taskIdentifier] = file
                }
                task.resume()
            }
        }

        public func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            lock.withLock { received[dataTask.taskIdentifier, default: Data()].append(data) }
        }

        public func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            let (continuation, body, file) = lock.withLock {
                (
                    waiting.removeValue(forKey: task.taskIdentifier),
                    received.removeValue(forKey: task.taskIdentifier) ?? Data(),
                    files.removeValue(forKey: task.taskIdentifier)
                )
            }
            if let file { try? FileManager.default.removeItem(at: file) }
            if let error {
                continuation?.resume(throwing: error)
            } else {
                continuation?.resume(
                    returning: HTTPResponseSpec(
                        status: (task.response as? HTTPURLResponse)?.statusCode ?? 0, body: body))
            }
        }

        public func urlSessionDidFinishEvents(forBackgroundURLSession session: URLSession) {
            let handler = lock.withLock { () -> (@Sendable () -> Void)? in
                defer { finishedEvents = nil }
                return finishedEvents
            }
            DispatchQueue.main.async { handler?() }
        }
    }
#endif
