import ArgumentParser
import Crypto
import Foundation
import HeraldSimulator
import HeraldWebPush

/// `herald webpush keygen` and `herald webpush key`: the VAPID key pair an app's web push signs
/// with, and the public half a web app passes to `pushManager.subscribe`.
struct WebPushCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webpush",
        abstract: "Web Push VAPID keys: make one, or print the public key of one.",
        subcommands: [Keygen.self, Key.self])

    struct Keygen: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "keygen",
            abstract: "Write a new VAPID key (P-256, PEM, mode 0600) and print its public key.",
            discussion: """
                The public key (base64url of the uncompressed point) is the applicationServerKey a web app \
                subscribes with. A subscription stays bound to the key it was made with: when you rotate, keep the \
                old key under apps[].webpush.deprecated_keys so older subscriptions keep working. An existing file \
                is never overwritten.
                """)

        @Option(name: .customLong("out"), help: "Where to write the private key (PEM).")
        var output = "vapid-key.pem"

        func run() throws {
            guard !FileManager.default.fileExists(atPath: output) else {
                printError("herald webpush keygen: \(output) exists; choose another --out (it is never overwritten)")
                throw ExitCode(2)
            }
            let key = P256.Signing.PrivateKey()
            do {
                try SecretFile.write(key.pemRepresentation + "\n", to: output)
            } catch {
                printError("herald webpush keygen: cannot write \(output): \(error)")
                throw ExitCode(1)
            }
            printOutput(
                """
                Wrote \(output) (mode 0600). Public key (the web app's applicationServerKey):
                \(VAPID.publicKeyText(key.publicKey))
                In herald.yaml:
                  apps:
                    - id: …
                      webpush: { vapid_key_file: \(output), subject: "mailto:you@example.com" }
                """)
        }
    }

    struct Key: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "key", abstract: "Print the public key (base64url) of a VAPID key file.")

        @Option(name: .customLong("key-file"), help: "A VAPID private key (PEM).") var keyFile: String

        func run() throws {
            let key: P256.Signing.PrivateKey
            do {
                key = try VAPID.key(file: keyFile)
            } catch {
                printError("herald webpush key: \(error)")
                throw ExitCode(2)
            }
            printOutput(VAPID.publicKeyText(key.publicKey))
        }
    }
}
