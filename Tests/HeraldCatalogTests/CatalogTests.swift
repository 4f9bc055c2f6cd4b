import Foundation
import HeraldCatalog
import HeraldCore
import HeraldPayload
import Testing

@Suite("Notification catalog")
struct CatalogTests {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Examples")

    @Test("the example catalogs pass the check", arguments: ["syncwell.yaml", "lucidpal.yaml"])
    func examplesPass(name: String) throws {
        let catalog = try CatalogLoader.load(file: Self.examples.appendingPathComponent(name).path)
        #expect(!catalog.types.isEmpty)
    }

    @Test("every kind of problem is found, with its line")
    func problems() throws {
        let yaml = """
            app:
              name: Test
              default_locale: en
              copy_rules: { title_max: 20, body_max: 40, banned_phrases: ["upgrade now"], no_money: true }
            types:
              a:
                placeholders: [name]
                thread_id: "t-{nope}"
                copy:
                  en: { title: "Hello {name}", body: "Hi {missing}" }
              b:
                copy:
                  fr: { title: "Bonjour", body: "Salut" }
              c:
                copy:
                  en: { title: "A title far longer than twenty", body: "Upgrade now for $4.99 per month" }
              d:
                stakes: high
                copy:
                  en: { title: "Approve", body: "Approve the card" }
                actions:
                  - { id: APPROVE, title: "Approve" }
                  - { id: REJECT, title: "Reject", destructive: true }
                  - { id: LATER, title: "Later", authentication_required: true }
            """
        let catalog = try CatalogLoader.parse(yaml: yaml, file: "test.yaml")
        let problems = CatalogChecker.check(catalog)
        func has(_ key: String, _ fragment: String, line: Int? = nil) -> Bool {
            problems.contains { $0.key == key && $0.message.contains(fragment) && (line == nil || $0.line == line) }
        }
        #expect(has("types.a.thread_id", "unknown placeholder {nope}"))
        #expect(has("types.a.copy.en.body", "unknown placeholder {missing}", line: 10))
        #expect(!problems.contains { $0.key == "types.a.copy.en.title" })
        #expect(has("types.b.copy", "no copy for the default locale"))
        #expect(has("types.c.copy.en.title", "the app allows 20", line: 16))
        #expect(has("types.c.copy.en.body", "banned phrase"))
        #expect(has("types.c.copy.en.body", "never ask for money"))
        #expect(has("types.d.actions", "3 actions; at most 2"))
        #expect(has("types.d.actions.APPROVE", "authentication_required"))
        #expect(!problems.contains { $0.key == "types.d.actions.REJECT" })
        #expect(throws: ConfigurationError.self) {
            try CatalogLoader.parse(yaml: "types:\n  a:\n    stakes: enormous\n", file: "x.yaml")
        }
    }

    @Test(
        "Live Activity types: attributes_type, a default-locale title and known placeholders are checked; alerts follow the locale chain"
    )
    func activityTypes() throws {
        let yaml = """
            app: { name: Test, default_locale: en, copy_rules: { title_max: 20 } }
            activities:
              good:
                attributes_type: JobAttributes
                stakes: low
                placeholders: [job]
                copy:
                  en: { title: "{job} runs", body: "Step {job}" }
                  fr: { title: "{job} tourne" }
              nameless:
                copy:
                  fr: { title: "Bonjour {who}" }
              long:
                attributes_type: "Bad Name"
                copy:
                  en: { title: "A title far longer than twenty", body: "b" }
                  de: { body: "kein Titel" }
            """
        let catalog = try CatalogLoader.parse(yaml: yaml, file: "test.yaml")
        let problems = CatalogChecker.check(catalog)
        func has(_ key: String, _ fragment: String) -> Bool {
            problems.contains { $0.key == key && $0.message.contains(fragment) }
        }
        #expect(!problems.contains { $0.key.hasPrefix("activities.good") }, "\(problems)")
        #expect(has("activities.nameless.attributes_type", "required"))
        #expect(has("activities.nameless.copy", "no alert title for the default locale"))
        #expect(has("activities.nameless.copy.fr.title", "unknown placeholder {who}"))
        #expect(has("activities.long.attributes_type", "letters, digits"))
        #expect(has("activities.long.copy.en.title", "the app allows 20"))
        #expect(has("activities.long.copy.de.title", "needs a title"))
        #expect(throws: ConfigurationError.self) {
            try CatalogLoader.parse(yaml: "activities:\n  a:\n    subtitle: x\n", file: "x.yaml")
        }
        let good = try #require(catalog.activity("good"))
        #expect(good.stakes == .low && good.attributesType == "JobAttributes")
        let french = good.alert(locale: "fr-CA", defaultLocale: "en", data: ["job": "Export"])
        #expect(french == LiveActivityAlert(title: "Export tourne"))
        let english = good.alert(locale: "de", defaultLocale: "en", data: ["job": "Export"])
        #expect(english == LiveActivityAlert(title: "Export runs", body: "Step Export"))
    }

    @Test("rendering follows fr-CA → fr → default and uses the fallback body when data is missing (S9, L3)")
    func rendering() throws {
        let catalog = try CatalogLoader.load(file: Self.examples.appendingPathComponent("syncwell.yaml").path)
        let error = try #require(catalog.type("PN-02"))
        let french = try #require(
            error.render(locale: "fr-CA", defaultLocale: "en", data: ["Source": "Garmin", "source_id": "garmin"]))
        #expect(french.title == "SyncWell : action requise")
        #expect(french.body == "Votre connexion à Garmin rencontre un problème. Touchez pour corriger.")
        let german = try #require(error.render(locale: "de-DE", defaultLocale: "en", data: ["Source": "Garmin"]))
        #expect(german.title == "SyncWell Action Required")
        let noData = try #require(error.render(locale: "en", defaultLocale: "en", data: [:]))
        #expect(noData.body == "One of your connections has an issue. Tap to fix.")
        #expect(Placeholders.render(error.deepLink!, data: ["source_id": "garmin"]) == "syncwell://connection/garmin")
        let lucidpal = try CatalogLoader.load(file: Self.examples.appendingPathComponent("lucidpal.yaml").path)
        let dormant = try #require(lucidpal.type("dormant_calendar"))
        #expect(
            dormant.render(locale: nil, defaultLocale: "en", data: ["event_count": "3"])?.body
                == "You have 3 events this week. I can help you prepare for all of them.")
        #expect(
            dormant.render(locale: nil, defaultLocale: "en", data: [:])?.body?.hasPrefix("Ask about your schedule")
                == true)
        #expect(Template.localeChain("fr_CA", defaultLocale: "en") == ["fr-CA", "fr", "en"])
    }
}
