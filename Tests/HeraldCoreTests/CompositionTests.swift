import Foundation
import HeraldCore
import HeraldPayload
import Testing

/// The composer without a server: a draft becomes stored content, a due time and a lane, or an
/// error naming the field a person must fix.
@Suite struct CompositionTests {
    static let now = Date(timeIntervalSince1970: 1_795_000_000)

    /// SyncWell's sync-error type: user-controllable, a thread, a deep link, English and French.
    static var catalog: Catalog {
        var type = CatalogType(name: "sync_failed")
        type.id = "PN-02"
        type.placeholders = ["Source", "source_id"]
        type.threadID = "sync-{source_id}"
        type.deepLink = "syncwell://sources/{source_id}"
        type.copy = [
            "en": CatalogCopy(title: "Sync paused", body: "{Source} needs you to sign in again."),
            "fr": CatalogCopy(title: "Synchro en pause", body: "{Source} vous demande de vous reconnecter."),
        ]
        var receipt = CatalogType(name: "receipt")
        receipt.transactional = true
        receipt.copy = ["en": CatalogCopy(title: "Receipt", body: "Thanks for your order.")]
        var approval = CatalogType(name: "approval")
        approval.copy = ["en": CatalogCopy(title: "Approve?", body: "{what}")]
        approval.placeholders = ["what"]
        approval.actions = [
            CatalogAction(id: "APPROVE", title: "Approve"), CatalogAction(id: "REJECT", title: "Reject"),
        ]
        return Catalog(app: CatalogApp(), types: [type, receipt, approval])
    }

    static func compose(_ draft: NotificationDraft, catalog: Catalog? = catalog, platforms: PushPlatforms = .fcm)
        throws(CompositionError) -> ComposedNotification
    {
        try NotificationComposer.compose(
            draft, payloadKey: "syncwell", catalog: catalog, platforms: platforms, now: now)
    }

    static func refusal(_ draft: NotificationDraft, catalog: Catalog? = catalog, platforms: PushPlatforms = .fcm)
        -> CompositionError?
    {
        do {
            _ = try compose(draft, catalog: catalog, platforms: platforms)
            return nil
        } catch {
            return error
        }
    }

    @Test("a plain alert keeps its APNs payload, is due now and goes in the normal lane")
    func plainAlert() throws {
        let composed = try Self.compose(
            NotificationDraft(alert: .init(title: "Hello", body: "World"), data: .object(["k": .int(1)])))
        #expect(composed.dueAt == Self.now)
        #expect(!composed.urgent)
        #expect(composed.content.typed == nil)
        #expect(composed.content.deliverAt == nil)
        #expect(composed.content.content.title == "Hello")
        #expect(composed.content.content.pushType == .alert)
        #expect(composed.apnsPayload != nil)
    }

    @Test(
        "a typed draft (by external id) renders the default locale, fills the type's templates and is rendered per device later"
    )
    func typed() throws {
        let composed = try Self.compose(
            NotificationDraft(
                data: .object(["Source": .string("Strava"), "source_id": .string("strava")]), type: "PN-02"))
        #expect(composed.apnsPayload == nil)
        #expect(composed.content.typed?.type == "sync_failed")
        #expect(composed.content.typed?.data["Source"] == "Strava")
        #expect(composed.content.content.title == "Sync paused")
        #expect(composed.content.content.body == "Strava needs you to sign in again.")
        #expect(composed.content.content.threadID == "sync-strava")
        #expect(composed.content.content.data?["deep_link"] == .string("syncwell://sources/strava"))
        #expect(composed.content.content.data?["type"] == .string("sync_failed"))
        #expect(composed.content.content.analyticsLabel == "sync_failed")
    }

    @Test("transactional types and an explicit priority 10 are urgent; an alert's default priority is not")
    func lanes() throws {
        #expect(try Self.compose(NotificationDraft(type: "receipt")).urgent)
        #expect(try Self.compose(NotificationDraft(alert: .init(body: "x"), priority: 10)).urgent)
        #expect(try !Self.compose(NotificationDraft(alert: .init(body: "x"))).urgent)
    }

    @Test("deliver_at later than now is kept as the due time and in the content; a past one means now")
    func scheduled() throws {
        let later = Self.now.addingTimeInterval(3600)
        let composed = try Self.compose(NotificationDraft(alert: .init(body: "x"), deliverAt: HeraldTime.format(later)))
        #expect(composed.dueAt == later)
        #expect(composed.content.deliverAt == later)
        let past = try Self.compose(NotificationDraft(alert: .init(body: "x"), deliverAt: "2020-01-01T00:00:00Z"))
        #expect(past.dueAt == Self.now)
        #expect(past.content.deliverAt == nil)
    }

    @Test("each refusal names its field")
    func refusals() {
        let cases: [(NotificationDraft, Catalog?, String, CompositionError.Code)] = [
            (NotificationDraft(type: "PN-02"), nil, "type", .invalid),
            (NotificationDraft(type: "nope"), Self.catalog, "type", .invalid),
            (NotificationDraft(alert: .init(body: "x"), pushType: "voip"), nil, "push_type", .invalid),
            (NotificationDraft(alert: .init(body: "x"), pushType: "nonsense"), nil, "push_type", .invalid),
            (NotificationDraft(alert: .init(body: "x"), priority: 7), nil, "priority", .invalid),
            (
                NotificationDraft(pushType: "background", priority: 10, contentAvailable: true), nil, "priority",
                .invalid
            ),
            (
                NotificationDraft(alert: .init(body: "x"), collapseID: String(repeating: "c", count: 65)), nil,
                "collapse_id", .invalid
            ),
            (
                NotificationDraft(alert: .init(body: "x"), interruptionLevel: "loud"), nil, "interruption_level",
                .invalid
            ),
            (NotificationDraft(alert: .init(body: "x"), relevanceScore: 2), nil, "relevance_score", .invalid),
            (NotificationDraft(alert: .init(body: "x"), badge: -1), nil, "badge", .invalid),
            (NotificationDraft(alert: .init(body: "x"), data: .array([])), nil, "data", .invalid),
            (
                NotificationDraft(alert: .init(body: "x"), data: .object(["google.x": .int(1)])), nil, "data.google.x",
                .invalid
            ),
            (
                NotificationDraft(alert: .init(body: "x"), data: .object(["herald": .int(1)])), nil, "data.herald",
                .invalid
            ),
            (
                NotificationDraft(data: .object(["deep_link": .string("x")]), type: "receipt"), Self.catalog,
                "data.deep_link", .invalid
            ),
            (NotificationDraft(alert: .init(body: "x"), deliverAt: "tomorrow"), nil, "deliver_at", .invalid),
            (
                NotificationDraft(alert: .init(body: "x"), deliverAt: "2099-01-01T00:00:00Z"), nil, "deliver_at",
                .invalid
            ),
            (NotificationDraft(alert: .init(body: "x"), androidImage: "ftp://x/y.png"), nil, "android.image", .invalid),
            (
                NotificationDraft(alert: .init(body: String(repeating: "é", count: 3000))), nil, "alert.body",
                .payloadTooLarge
            ),
        ]
        for (draft, catalog, field, code) in cases {
            let error = Self.refusal(draft, catalog: catalog)
            #expect(error?.field == field, "\(draft)")
            #expect(error?.code == code, "\(draft)")
        }
    }

    @Test("a typed payload counts each action's token against the 4 KB limit")
    func actionTokensCount() throws {
        var withoutActions = Self.catalog
        withoutActions.types[2].actions = []
        func data(_ size: Int) -> JSONValue {
            .object(["what": .string("x"), "extra": .string(String(repeating: "b", count: size))])
        }
        // The largest data the type takes without actions (to 10 bytes)…
        var size = 3000
        while (try? NotificationComposer.compose(
            NotificationDraft(data: data(size + 10), type: "approval"), payloadKey: "syncwell", catalog: withoutActions,
            platforms: [], now: Self.now)) != nil
        {
            size += 10
        }
        // …is too large once two action tokens ride in every delivery's stamp.
        #expect(
            Self.refusal(NotificationDraft(data: data(size), type: "approval"), catalog: withoutActions, platforms: [])
                == nil)
        let error = Self.refusal(NotificationDraft(data: data(size), type: "approval"), platforms: [])
        #expect(error?.code == .payloadTooLarge)
        #expect(error?.field == "data")
        #expect(
            ActionTokenLayout.length(action: "APPROVE")
                == Self.catalog.type("approval")?.actionTokenLengths.first?.token)
    }

    @Test("a web push message must fit 3,993 bytes of plaintext when the app sends web push")
    func webPushLimit() {
        func alert(_ length: Int) -> NotificationDraft {
            NotificationDraft(alert: .init(body: String(repeating: "a", count: length)))
        }
        // APNs and FCM take this body; the web push plaintext (body, tag, stamp) is over 3,993 bytes.
        #expect(Self.refusal(alert(3_920), platforms: .fcm) == nil)
        let error = Self.refusal(alert(3_920), platforms: [.fcm, .webpush])
        #expect(error?.code == .payloadTooLarge)
        #expect(error?.field == "alert.body")
        #expect(error?.message.contains("web push") == true)
        #expect(Self.refusal(alert(3_700), platforms: [.fcm, .webpush]) == nil)
    }
}
