// Apple adapter: compiles only where OSLog exists; Linux CI does not build it.
#if canImport(OSLog)
    public import OSLog

    /// `os.Logger` as HeraldKit's logger. Messages are public: HeraldKit never logs a secret, and
    /// device tokens only by their first 8 characters.
    public struct OSLogKitLogger: KitLogger {
        private let logger: Logger

        public init(subsystem: String, category: String = "HeraldKit") {
            logger = Logger(subsystem: subsystem, category: category)
        }

        public func log(_ level: KitLogLevel, _ message: String) {
            switch level {
            case .debug: logger.debug("\(message, privacy: .public)")
            case .info: logger.info("\(message, privacy: .public)")
            case .warning: logger.warning("\(message, privacy: .public)")
            case .error: logger.error("\(message, privacy: .public)")
            }
        }
    }
#endif
