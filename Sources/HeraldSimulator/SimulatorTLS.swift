import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// The simulator's TLS material: a self-signed CA (written as PEM for clients to trust) and a
/// server certificate it signs for `localhost` and `127.0.0.1`/`::1`. Kept in a directory so a
/// restarted simulator is still trusted by clients that read the CA file once.
package struct SimulatorTLS: Sendable {
    package var caCertificatePEM: String
    package var serverCertificatePEM: String
    package var serverKeyPEM: String

    /// Loads the files from `directory` when they exist, otherwise creates and writes them.
    package static func loadOrCreate(directory: String) throws -> SimulatorTLS {
        let fileManager = FileManager.default
        try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let caPath = directory + "/sim-ca.pem"
        let certificatePath = directory + "/sim-server.pem"
        let keyPath = directory + "/sim-server-key.pem"
        if let ca = try? String(contentsOfFile: caPath, encoding: .utf8),
            let certificate = try? String(contentsOfFile: certificatePath, encoding: .utf8),
            let key = try? String(contentsOfFile: keyPath, encoding: .utf8)
        {
            return SimulatorTLS(caCertificatePEM: ca, serverCertificatePEM: certificate, serverKeyPEM: key)
        }
        let material = try create()
        try material.caCertificatePEM.write(toFile: caPath, atomically: true, encoding: .utf8)
        try material.serverCertificatePEM.write(toFile: certificatePath, atomically: true, encoding: .utf8)
        try SecretFile.write(material.serverKeyPEM, to: keyPath)
        return material
    }

    /// Creates a new CA and server certificate, valid from an hour ago for ten years.
    package static func create() throws -> SimulatorTLS {
        let caKey = P256.Signing.PrivateKey()
        let serverKey = P256.Signing.PrivateKey()
        let now = Date()
        let caName = try DistinguishedName {
            OrganizationName("Herald")
            CommonName("Herald Simulator CA")
        }
        let ca = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(caKey.publicKey),
            notValidBefore: now - 3600,
            notValidAfter: now + 10 * 365 * 86400,
            issuer: caName,
            subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: Certificate.PrivateKey(caKey))
        let server = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(serverKey.publicKey),
            notValidBefore: now - 3600,
            notValidAfter: now + 10 * 365 * 86400,
            issuer: caName,
            subject: try DistinguishedName { CommonName("localhost") },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([
                    .dnsName("localhost"),
                    .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
                    .ipAddress(ASN1OctetString(contentBytes: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
                ])
            },
            issuerPrivateKey: Certificate.PrivateKey(caKey))
        return SimulatorTLS(
            caCertificatePEM: try ca.serializeAsPEM().pemString,
            serverCertificatePEM: try server.serializeAsPEM().pemString,
            serverKeyPEM: serverKey.pemRepresentation)
    }

    /// A TLS 1.2+ server configuration offering only `h2`.
    func serverConfiguration() throws -> TLSConfiguration {
        let certificate = try NIOSSLCertificate(bytes: Array(serverCertificatePEM.utf8), format: .pem)
        let key = try NIOSSLPrivateKey(bytes: Array(serverKeyPEM.utf8), format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(certificate)], privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.applicationProtocols = ["h2"]
        return configuration
    }
}
