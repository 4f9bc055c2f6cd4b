import Foundation
import HeraldTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `server.tls` on the real listener of `herald serve`: HTTPS with HTTP/2 by ALPN, HSTS, a
/// `Secure` `__Host-` session cookie, and the certificate swapped on SIGHUP.
@Suite("TLS listener")
struct TLSTests {
    /// A self-signed certificate for 127.0.0.1 and its key (openssl), written to `directory`.
    static func certificate(_ name: String, in directory: String) async throws -> (cert: String, key: String) {
        let cert = directory + "/\(name).pem"
        let key = directory + "/\(name)-key.pem"
        let run = try await runProcess(
            URL(fileURLWithPath: "/usr/bin/env"),
            [
                "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", key, "-out", cert,
                "-days", "1", "-subj", "/CN=\(name)", "-addext", "subjectAltName=IP:127.0.0.1",
            ])
        #expect(FileManager.default.fileExists(atPath: cert), "openssl: \(run)")
        return (cert, key)
    }

    @Test(
        "with server.tls, curl --cacert talks HTTPS and HTTP/2; answers carry HSTS; the session cookie is Secure and __Host-; SIGHUP swaps the certificate for new connections"
    )
    func httpsAndReload() async throws {
        let directory = try makeTemporaryDirectory("herald-tls")
        let first = try await Self.certificate("herald-first", in: directory)
        let second = try await Self.certificate("herald-second", in: directory)
        let served = (cert: directory + "/served.pem", key: directory + "/served-key.pem")
        try FileManager.default.copyItem(atPath: first.cert, toPath: served.cert)
        try FileManager.default.copyItem(atPath: first.key, toPath: served.key)
        try """
        server: { host: 127.0.0.1, tls: { cert_file: served.pem, key_file: served-key.pem } }
        database: { url: "sqlite://\(directory)/herald.sqlite" }
        admin_key: "tls-test-admin-key-0123456789abcdef"
        apps: [{ id: tls, keys: { server: "tls-test-server-key-0123456789abcdef" } }]
        """.write(toFile: directory + "/herald.yaml", atomically: true, encoding: .utf8)
        let (process, port) = try await startHerald(
            ["serve", "--config", directory + "/herald.yaml"], log: directory + "/serve.err", scheme: "https",
            curlOptions: ["--cacert", first.cert])
        defer { if process.isRunning { process.terminate() } }
        let base = "https://127.0.0.1:\(port)"

        let version = try await runProcess(
            URL(fileURLWithPath: "/usr/bin/env"),
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_version}", "--cacert", first.cert, base + "/livez"])
        #expect(version.stdout == "2")
        let http1 = try await runProcess(
            URL(fileURLWithPath: "/usr/bin/env"),
            [
                "curl", "-s", "--http1.1", "-o", "/dev/null", "-w", "%{http_version}", "--cacert", first.cert,
                base + "/livez",
            ])
        #expect(http1.stdout == "1.1")
        let headers = try await runProcess(
            URL(fileURLWithPath: "/usr/bin/env"),
            ["curl", "-s", "-D", "-", "-o", "/dev/null", "--cacert", first.cert, base + "/dashboard/login"])
        let lower = headers.stdout.lowercased()
        #expect(lower.contains("strict-transport-security: max-age="))
        let cookie =
            headers.stdout.split(whereSeparator: \.isNewline).first {
                $0.lowercased().hasPrefix("set-cookie: __host-herald_login=")
            }?.lowercased() ?? ""
        #expect(
            cookie.contains("; secure") && cookie.contains("; path=/") && cookie.contains("; httponly"),
            "\(headers.stdout)")
        // A device's report over HTTP/2, answered on its stream's event loop: the 404 naming
        // delivery_id, with HSTS.
        let report = try await runProcess(
            URL(fileURLWithPath: "/usr/bin/env"),
            [
                "curl", "-s", "-D", "-", "-w", "\n%{http_version}", "--cacert", first.cert, "-H",
                "Authorization: Bearer tls-test-server-key-0123456789abcdef", "-H", "Content-Type: application/json",
                "--data", #"{"delivery_id":7,"device_id":"d"}"#, base + "/v1/apps/tls/opened",
            ])
        #expect(
            report.stdout.hasSuffix("\n2") && report.stdout.hasPrefix("HTTP/2 404")
                && report.stdout.contains(#""field":"delivery_id""#)
                && report.stdout.lowercased().contains("strict-transport-security: max-age="), "\(report.stdout)")
        // Plain HTTP is not served on the TLS port.
        #expect(try await curl(["--max-time", "2", "http://127.0.0.1:\(port)/livez"]).status != 200)

        // SIGHUP: the files now hold the second certificate; new connections get it.
        try FileManager.default.removeItem(atPath: served.cert)
        try FileManager.default.removeItem(atPath: served.key)
        try FileManager.default.copyItem(atPath: second.cert, toPath: served.cert)
        try FileManager.default.copyItem(atPath: second.key, toPath: served.key)
        kill(process.processIdentifier, SIGHUP)
        var swapped = false
        for _ in 0..<500 where !swapped {
            swapped = try await curl(["--max-time", "2", "--cacert", second.cert, base + "/livez"]).status == 200
            if !swapped { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(swapped)
        #expect(try await curl(["--max-time", "2", "--cacert", first.cert, base + "/livez"]).status == 0)
        #expect(process.isRunning)
        let log = (try? String(contentsOfFile: directory + "/serve.err", encoding: .utf8)) ?? ""
        #expect(log.contains("TLS certificate reloaded"))

        // A reload that cannot read its files keeps the certificate in use.
        try "not a certificate".write(toFile: served.cert, atomically: true, encoding: .utf8)
        kill(process.processIdentifier, SIGHUP)
        var refused = false
        for _ in 0..<500 where !refused {
            refused = ((try? String(contentsOfFile: directory + "/serve.err", encoding: .utf8)) ?? "").contains(
                "TLS certificate not reloaded")
            if !refused { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(refused)
        #expect(try await curl(["--max-time", "2", "--cacert", second.cert, base + "/livez"]).status == 200)
    }
}
