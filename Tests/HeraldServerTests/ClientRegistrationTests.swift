import Crypto
import Foundation
import HeraldCatalog
import HeraldCore
import HeraldEngine
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Hummingbird
import Testing

/// The public client key cannot register, move or delete another user's devices.
@Suite("Client registration is bounded by user tokens", .serialized)
struct ClientRegistrationTests {
    static func errorField(_ response: (status: HTTPResponse.Status, body: [String: Any])) -> String? {
        (response.body["error"] as? [String: String])?["field"]
    }

    static func deviceJSON(_ device: String, user: String, token: String, extra: String = "") -> String {
        #"{"device_id":"\#(device)","user_id":"\#(user)","token":"\#(token)","environment":"sandbox"\#(extra)}"#
    }

    @Test(
        "an attacker with the client key cannot subscribe their token to a victim: no token 401, forged/expired 401, other user's token 403; the victim's send never reaches the attacker"
    )
    func subscribeToVictim() async throws {
        try await withServer { server in
            let tokens = makeDeviceTokens(2)
            let (victim, attacker) = (tokens[0], tokens[1])
            #expect(try await server.register("alice-phone", user: "alice", token: victim) == .created)
            let body = Self.deviceJSON("evil", user: "alice", token: attacker)
            let path = "/v1/apps/demo/devices"
            let noToken = try await server.request(.post, path, key: ServerHarness.client, json: body)
            #expect(noToken.status == .unauthorized)
            #expect(Self.errorField(noToken) == "X-Herald-User-Token")
            let forged = UserToken(userID: "alice", expiresAt: Date().addingTimeInterval(600))
                .signed(secret: Data("not-the-apps-secret-0123456789abcdef".utf8))
            let forgedAnswer = try await server.request(
                .post, path, key: ServerHarness.client, userToken: forged, json: body)
            #expect(forgedAnswer.status == .unauthorized)
            #expect(Self.errorField(forgedAnswer) == "X-Herald-User-Token")
            let expired = ServerHarness.userToken("alice", lifetime: 3600, now: Date().addingTimeInterval(-7200))
            #expect(
                try await server.request(.post, path, key: ServerHarness.client, userToken: expired, json: body).status
                    == .unauthorized)
            let tooLong = ServerHarness.userToken("alice", lifetime: 3 * 86400)
            #expect(
                try await server.request(.post, path, key: ServerHarness.client, userToken: tooLong, json: body).status
                    == .unauthorized)
            // alg "none" with the victim's id and no signature.
            let none =
                Base64URL.encode(Data(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "."
                + Base64URL.encode(Data(#"{"sub":"alice","exp":\#(Int(Date().timeIntervalSince1970) + 600)}"#.utf8))
                + "."
            #expect(
                try await server.request(.post, path, key: ServerHarness.client, userToken: none, json: body).status
                    == .unauthorized)
            // Mallory's own, valid token does not speak for alice.
            let mallory = try await server.request(
                .post, path, key: ServerHarness.client, userToken: ServerHarness.userToken("mallory"), json: body)
            #expect(mallory.status == .forbidden)
            #expect(Self.errorField(mallory) == "user_id")

            let sent = try await server.send(
                #"{"to":{"user_ids":["alice"]},"alert":{"body":"Your login code is 493021"}}"#)
            #expect(sent.body["recipients"] as? Int == 1)
            _ = try await server.settled(try #require(sent.body["id"] as? String))
            #expect(server.simulator.state.inbox(for: victim).count == 1)
            #expect(server.simulator.state.inbox(for: attacker).isEmpty)
        }
    }

    @Test(
        "a device_id of another user moves only with the token it holds (shared iPad yes, stranger no), and the old user's details are not echoed"
    )
    func takeOver() async throws {
        try await withServer { server in
            let tokens = makeDeviceTokens(2)
            let path = "/v1/apps/demo/devices"
            let alice = try await server.request(
                .post, path, key: ServerHarness.client, userToken: ServerHarness.userToken("alice"),
                json: Self.deviceJSON("shared-ipad", user: "alice", token: tokens[0], extra: #","name":"Alice iPad""#))
            #expect(alice.status == .created)
            // A stranger with a valid token of their own, but not the device's APNs token.
            let stranger = try await server.request(
                .post, path, key: ServerHarness.client, userToken: ServerHarness.userToken("mallory"),
                json: Self.deviceJSON("shared-ipad", user: "mallory", token: tokens[1]))
            #expect(stranger.status == .forbidden)
            #expect(Self.errorField(stranger) == "device_id")
            #expect(stranger.body["name"] == nil)
            let kept = try await server.request(.get, "/v1/apps/demo/users/alice/devices")
            let keptDevice = try #require((kept.body["devices"] as? [[String: Any]])?.first)
            #expect(keptDevice["token"] as? String == tokens[0])
            #expect(keptDevice["name"] as? String == "Alice iPad")
            // Bob signs in on the same iPad: same APNs token, his own user token.
            let bob = try await server.request(
                .post, path, key: ServerHarness.client, userToken: ServerHarness.userToken("bob"),
                json: Self.deviceJSON("shared-ipad", user: "bob", token: tokens[0]))
            #expect(bob.status == .ok)
            #expect(bob.body["user_id"] as? String == "bob")
            #expect(bob.body["name"] == nil)
            let aliceAfter = try await server.request(.get, "/v1/apps/demo/users/alice/devices")
            #expect((aliceAfter.body["devices"] as? [Any])?.isEmpty == true)
            // The server key is trusted as before.
            #expect(
                try await server.register("shared-ipad", user: "carol", token: tokens[1], key: ServerHarness.server)
                    == .ok)
        }
    }

    @Test("a client key deletes only a device of the user its token names")
    func deleteNeedsOwner() async throws {
        try await withServer { server in
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("alice-phone", user: "alice", token: token) == .created)
            let path = "/v1/apps/demo/devices/alice-phone"
            #expect(try await server.request(.delete, path, key: ServerHarness.client).status == .unauthorized)
            let other = try await server.request(
                .delete, path, key: ServerHarness.client, userToken: ServerHarness.userToken("mallory"))
            #expect(other.status == .forbidden)
            #expect(Self.errorField(other) == "device_id")
            #expect(
                try await server.request(.get, "/v1/apps/demo/users/alice/devices").body["devices"].map {
                    ($0 as? [Any])?.count
                } == 1)
            let own = try await server.request(
                .delete, path, key: ServerHarness.client, userToken: ServerHarness.userToken("alice"))
            #expect(own.status == .noContent)
            #expect(
                try await server.request(.get, "/v1/apps/demo/users/alice/devices").body["devices"].map {
                    ($0 as? [Any])?.count
                } == 0)
        }
    }

    @Test(
        "registering one device more than max_devices_per_user deactivates the least recently registered (DeviceLimit)")
    func deviceLimit() async throws {
        try await withServer(app: { $0.maxDevicesPerUser = 3 }) { server in
            let tokens = makeDeviceTokens(4)
            for (index, token) in tokens.enumerated() {
                #expect(try await server.register("d\(index)", user: "bob", token: token) == .created)
                try await Task.sleep(for: .milliseconds(5))  // distinct registration times
            }
            let devices = try #require(
                try await server.request(.get, "/v1/apps/demo/users/bob/devices").body["devices"] as? [[String: Any]])
            let inactive = devices.filter { $0["active"] as? Bool == false }
            #expect(inactive.map { $0["device_id"] as? String } == ["d0"])
            #expect(inactive.first?["inactive_reason"] as? String == "DeviceLimit")
            #expect(
                try await server.send(#"{"to":{"user_ids":["bob"]},"alert":{"body":"x"}}"#).body["recipients"] as? Int
                    == 3)
            // Registering d0 again makes it active and retires the next oldest (d1).
            #expect(try await server.register("d0", user: "bob", token: tokens[0]) == .ok)
            let after = try #require(
                try await server.request(.get, "/v1/apps/demo/users/bob/devices").body["devices"] as? [[String: Any]])
            #expect(after.filter { $0["active"] as? Bool == false }.map { $0["device_id"] as? String } == ["d1"])
        }
    }

    @Test("two keys per role while rotating; an unknown app and a wrong key get the same 401")
    func rotationAndProbing() async throws {
        let newServer = "server-key-NEW-0123456789abcdef"
        try await withServer(app: { $0.serverKeys.append(newServer) }) { server in
            let body = #"{"to":{"all":true},"alert":{"body":"x"}}"#
            #expect(
                try await server.request(.post, "/v1/apps/demo/notifications", key: ServerHarness.server, json: body)
                    .status == .accepted)
            #expect(
                try await server.request(.post, "/v1/apps/demo/notifications", key: newServer, json: body).status
                    == .accepted)
            let wrongKey = try await server.request(.get, "/v1/apps/demo/users/x/devices", key: "nope-0123456789abcdef")
            let unknownApp = try await server.request(
                .get, "/v1/apps/zzz/users/x/devices", key: "nope-0123456789abcdef")
            #expect(wrongKey.status == .unauthorized)
            #expect(unknownApp.status == .unauthorized)
            #expect(NSDictionary(dictionary: wrongKey.body) == NSDictionary(dictionary: unknownApp.body))
            // Another app's valid key on this app's path: the same answer again.
            let otherApp = try await server.request(.get, "/v1/apps/zzz/users/x/devices", key: ServerHarness.server)
            #expect(NSDictionary(dictionary: otherApp.body) == NSDictionary(dictionary: unknownApp.body))
        }
    }
}

@Suite("User tokens")
struct UserTokenTests {
    let secret = Data("user-token-secret-0123456789abcdef".utf8)
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("a signed token verifies to its user; every tampering is refused with a reason")
    func verify() throws {
        let token = UserToken(userID: "josé", expiresAt: now.addingTimeInterval(3600), issuedAt: now).signed(
            secret: secret)
        #expect(try UserToken.verify(token, secret: secret, now: now).userID == "josé")
        let parts = token.split(separator: ".").map(String.init)
        let otherClaims = Base64URL.encode(
            Data(#"{"sub":"mallory","exp":\#(Int(now.timeIntervalSince1970) + 600)}"#.utf8))
        #expect(throws: UserToken.Failure.self) {
            try UserToken.verify(parts[0] + "." + otherClaims + "." + parts[2], secret: secret, now: now)
        }
        #expect(throws: UserToken.Failure.self) {
            try UserToken.verify(token, secret: Data("another-secret-0123456789abcdef-xx".utf8), now: now)
        }
        #expect(throws: UserToken.Failure.self) {
            try UserToken.verify(token, secret: secret, now: now.addingTimeInterval(3600 + 61))
        }
        #expect(throws: UserToken.Failure.self) { try UserToken.verify("a.b", secret: secret, now: now) }
        let future = UserToken(
            userID: "u", expiresAt: now.addingTimeInterval(3600), issuedAt: now.addingTimeInterval(600)
        ).signed(secret: secret)
        #expect(throws: UserToken.Failure.self) { try UserToken.verify(future, secret: secret, now: now) }
        let longLived = UserToken(userID: "u", expiresAt: now.addingTimeInterval(25 * 3600)).signed(secret: secret)
        #expect(throws: UserToken.Failure.self) { try UserToken.verify(longLived, secret: secret, now: now) }
        // exp as a string is not a number.
        let header = Base64URL.encode(Data(#"{"alg":"HS256"}"#.utf8))
        let claims = Base64URL.encode(Data(#"{"sub":"u","exp":"1800000600"}"#.utf8))
        let stringExp = header + "." + claims
        let mac = Base64URL.encode(Data(HMACProbe.sign(stringExp, secret: secret)))
        #expect(throws: UserToken.Failure.self) {
            try UserToken.verify(stringExp + "." + mac, secret: secret, now: now)
        }
    }

    @Test(
        "configuration: verified registration without a secret, a short admin key and a key used twice are refused, naming the key"
    )
    func configuration() throws {
        func failure(_ yaml: String) -> String? {
            do {
                _ = try HeraldConfiguration.parse(yaml: yaml, file: "h.yaml")
                return nil
            } catch {
                return error.key
            }
        }
        let keys = #"keys: { server: "server-0123456789abcdef", client: "client-0123456789abcdef" }"#
        #expect(failure("apps:\n  - id: a\n    \(keys)\n") == "apps[0].user_token_secret")
        #expect(failure("apps:\n  - id: a\n    \(keys)\n    client_registration: unverified\n") == nil)
        #expect(failure("apps:\n  - id: a\n    \(keys)\n    user_token_secret: short\n") == "apps[0].user_token_secret")
        #expect(failure("admin_key: tooshort-0123456789\n") == "admin_key")
        #expect(
            failure(
                #"apps:\#n  - id: a\#n    keys: { server: "same-0123456789abcdef", client: "same-0123456789abcdef" }\#n    client_registration: unverified\#n"#
            )
                == "apps[0].keys.client")
        #expect(
            failure(#"apps:\#n  - id: a\#n    keys: { server: ["old-0123456789abcdef", "new-0123456789abcdef"] }\#n"#)
                == nil)
        #expect(
            failure(
                #"apps:\#n  - id: a\#n    keys: { server: ["a-0123456789abcdef", "b-0123456789abcdef", "c-0123456789abcdef"] }\#n"#
            )
                == "apps[0].keys.server")
    }
}

/// Signs like a backend that made a mistake (a string `exp`), to check Herald refuses it.
enum HMACProbe {
    static func sign(_ input: String, secret: Data) -> Data {
        Data(HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: secret)))
    }
}
