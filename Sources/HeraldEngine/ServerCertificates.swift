import Foundation
package import HeraldCatalog
package import Logging
import NIOCore
package import NIOSSL
import ServiceLifecycle
import Synchronization
import UnixSignals

/// The certificate chain and key Herald serves TLS with (`server.tls`), read from their PEM
/// files and read again on SIGHUP. Each new handshake takes the pair current at that moment
/// (NIOSSL's per-handshake context callback), so a reload swaps the certificate for new
/// connections while open ones carry on undisturbed. A reload that fails (a missing or
/// mismatched file) keeps the pair in use and says why.
package final class ServerCertificates: Sendable {
    package let files: HeraldConfiguration.TLSFiles
    private let current: Mutex<NIOSSLContextConfigurationOverride>
    private let initial: (chain: [NIOSSLCertificate], key: NIOSSLPrivateKey)

    package init(files: HeraldConfiguration.TLSFiles) throws(ConfigurationError) {
        self.files = files
        let loaded = try Self.load(files)
        initial = loaded
        current = Mutex(Self.override(loaded))
    }

    /// The server's TLS configuration: HTTP/2 and HTTP/1.1 offered by ALPN, TLS 1.2 at least,
    /// the certificate chosen per handshake from what was loaded last.
    package var tlsConfiguration: TLSConfiguration {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: initial.chain.map { .certificate($0) }, privateKey: .privateKey(initial.key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.sslContextCallback = { [self] _, promise in
            promise.succeed(current.withLock { $0 })
        }
        return configuration
    }

    /// Reads the files again; on success new handshakes use them.
    package func reload() throws(ConfigurationError) {
        let loaded = try Self.load(files)
        current.withLock { $0 = Self.override(loaded) }
    }

    private static func override(_ loaded: (chain: [NIOSSLCertificate], key: NIOSSLPrivateKey))
        -> NIOSSLContextConfigurationOverride
    {
        var override = NIOSSLContextConfigurationOverride()
        override.certificateChain = loaded.chain.map { .certificate($0) }
        override.privateKey = .privateKey(loaded.key)
        return override
    }

    private static func load(_ files: HeraldConfiguration.TLSFiles) throws(ConfigurationError) -> (
        chain: [NIOSSLCertificate], key: NIOSSLPrivateKey
    ) {
        func fail(_ key: String, _ message: String) -> ConfigurationError {
            ConfigurationError(
                file: key == "server.tls.cert_file" ? files.certFile : files.keyFile, line: nil, key: key,
                message: message)
        }
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(files.certFile)
        } catch {
            throw fail("server.tls.cert_file", "cannot read a PEM certificate chain (\(error))")
        }
        guard !chain.isEmpty else { throw fail("server.tls.cert_file", "holds no certificate") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: files.keyFile, format: .pem)
        } catch {
            throw fail("server.tls.key_file", "cannot read a PEM private key (\(error))")
        }
        // A key that does not match the certificate would fail every handshake: refuse it here.
        do {
            var check = TLSConfiguration.makeServerConfiguration(
                certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
            check.minimumTLSVersion = .tlsv12
            _ = try NIOSSLContext(configuration: check)
        } catch {
            throw fail("server.tls.key_file", "does not match the certificate in server.tls.cert_file (\(error))")
        }
        return (chain, key)
    }
}

/// Reloads the TLS certificate and key on every SIGHUP, until graceful shutdown.
package struct CertificateReloader: Service {
    let certificates: ServerCertificates
    let logger: Logger

    package init(certificates: ServerCertificates, logger: Logger) {
        self.certificates = certificates
        self.logger = logger
    }

    package func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        for await _ in signals.cancelOnGracefulShutdown() {
            do {
                try certificates.reload()
                logger.notice(
                    "TLS certificate reloaded", metadata: ["herald.tls.cert_file": "\(certificates.files.certFile)"])
            } catch {
                logger.error("TLS certificate not reloaded: the one in use is kept", metadata: ["error": "\(error)"])
            }
        }
    }
}
