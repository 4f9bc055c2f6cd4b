import Foundation
import HeraldAPNs
package import HeraldCatalog
import HeraldCore
import HeraldFCM
import HeraldWebPush
import Yams

/// What `herald config check` finds: every problem of a configuration file that `herald serve`
/// would stop at, or start without an app's APNs or FCM for, found without starting anything
/// (no listener, no database connection): the YAML, every key, the checks across keys (with
/// the environment applied as `herald serve` applies it), each app's catalog, its APNs key and
/// FCM service-account files, the CA files, and the TLS certificate and key.
package enum ConfigurationCheck {
    package struct Report: Sendable {
        /// Each problem, with file, line and key where there is one.
        package var problems: [ConfigurationError]
        /// What was checked, for the summary line.
        package var apps = 0
        package var catalogs = 0
    }

    package static func run(file: String, environment: [String: String]) -> Report {
        var report = Report(problems: [])
        let root: Node
        do {
            guard let composed = try YAMLReader.compose(YAMLReader.read(file: file, what: "configuration"), file: file)
            else { return report }
            root = composed
        } catch {
            report.problems = [error]
            return report
        }
        let problems = ConfigurationProblems()
        let reader = YAMLReader(file: file, directory: (file as NSString).deletingLastPathComponent, problems: problems)
        var configuration: HeraldConfiguration
        do {
            configuration = try reader.configuration(root)
        } catch {
            // The root is not a mapping: nothing else can be read.
            report.problems = problems.all + [error]
            return report
        }
        configuration.applyEnvironment(environment)
        do { try configuration.validate(file: file) } catch { problems.add(error) }
        report.apps = configuration.apps.count
        for (index, app) in configuration.apps.enumerated() {
            let key = "apps[\(index)]"
            if let catalog = app.catalogFile {
                report.catalogs += 1
                do {
                    let parsed = try CatalogLoader.parse(file: catalog)
                    for problem in CatalogChecker.check(parsed) {
                        problems.add(
                            ConfigurationError(
                                file: catalog, line: problem.line, key: problem.key, message: problem.message))
                    }
                } catch {
                    problems.add(error)
                }
            }
            if let apns = app.apns {
                do {
                    _ = try APNSSigningKey(file: apns.keyFile, keyID: apns.keyID, teamID: apns.teamID)
                } catch {
                    problems.add(
                        ConfigurationError(file: file, line: nil, key: key + ".apns.key_file", message: error.message))
                }
                if let endpoint = apns.endpoint {
                    do { _ = try APNSEndpoint(url: endpoint) } catch {
                        problems.add(
                            ConfigurationError(
                                file: file, line: nil, key: key + ".apns.endpoint", message: error.message))
                    }
                }
                readable(apns.caFile, key + ".apns.ca_file")
            }
            if let fcm = app.fcm {
                do { _ = try FCMServiceAccount(file: fcm.serviceAccountFile) } catch {
                    problems.add(
                        ConfigurationError(
                            file: file, line: nil, key: key + ".fcm.service_account_file", message: error.message))
                }
                readable(fcm.caFile, key + ".fcm.ca_file")
            }
            if let webpush = app.webpush {
                for (index, keyFile) in ([webpush.vapidKeyFile] + webpush.deprecatedKeyFiles).enumerated() {
                    do { _ = try VAPID.key(file: keyFile) } catch {
                        problems.add(
                            ConfigurationError(
                                file: file, line: nil,
                                key: key + (index == 0 ? ".webpush.vapid_key_file" : ".webpush.deprecated_keys"),
                                message: error.description))
                    }
                }
                readable(webpush.caFile, key + ".webpush.ca_file")
            }
        }
        if let tls = configuration.tls {
            do { _ = try ServerCertificates(files: tls) } catch { problems.add(error) }
        }
        report.problems = problems.all
        return report

        func readable(_ path: String?, _ key: String) {
            guard let path, !FileManager.default.isReadableFile(atPath: path) else { return }
            problems.add(ConfigurationError(file: file, line: nil, key: key, message: "cannot read \(path)"))
        }
    }
}
