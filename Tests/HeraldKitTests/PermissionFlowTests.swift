import Foundation
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import Testing

/// The permission flow as a pure function.
@Suite("HeraldKit permission flow")
struct PermissionFlowTests {
    let flow = PermissionFlow()
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("nothing at launch by default; the explanation after a moment of value; its yes asks the system")
    func moment() {
        #expect(flow.next(status: .notDetermined, intent: .appLaunched).step == .none)
        #expect(flow.next(status: .notDetermined, intent: .momentOfValue).step == .showPrePermission)
        #expect(
            flow.next(status: .notDetermined, intent: .prePermissionAccepted).step
                == .requestSystemPrompt(provisional: false))
        #expect(
            PermissionFlow(policy: .init(provisionalAtLaunch: true)).next(status: .notDetermined, intent: .appLaunched)
                .step
                == .requestSystemPrompt(provisional: true))
        #expect(
            PermissionFlow(policy: .init(offerAtLaunch: true)).next(status: .notDetermined, intent: .appLaunched).step
                == .showPrePermission)
    }

    @Test("denied never re-asks: only the user's own request leads to Settings")
    func denied() {
        for intent: PermissionIntent in [.appLaunched, .momentOfValue, .prePermissionAccepted] {
            #expect(flow.next(status: .denied, intent: intent).step == .none, "\(intent)")
        }
        #expect(flow.next(status: .denied, intent: .userAskedToEnable).step == .openSettings)
        #expect(flow.next(status: .authorized, intent: .userAskedToEnable).step == .none)
    }

    @Test(
        "a declined explanation waits the cooldown and stops after the policy's declines; provisional and ephemeral are upgraded on interest only"
    )
    func declinesAndQuietStates() {
        let (step, history) = flow.next(status: .notDetermined, intent: .prePermissionDeclined, now: now)
        #expect(step == .none && history.declines == 1)
        #expect(
            flow.next(
                status: .notDetermined, intent: .momentOfValue, history: history, now: now.addingTimeInterval(86_400)
            ).step == .none)
        #expect(
            flow.next(
                status: .notDetermined, intent: .momentOfValue, history: history,
                now: now.addingTimeInterval(8 * 86_400)
            ).step == .showPrePermission)
        let twice = PermissionFlow.History(declines: 2, lastDeclinedAt: now)
        #expect(
            flow.next(
                status: .notDetermined, intent: .momentOfValue, history: twice,
                now: now.addingTimeInterval(365 * 86_400)
            ).step == .none)
        #expect(
            flow.next(status: .notDetermined, intent: .userAskedToEnable, history: twice).step
                == .requestSystemPrompt(provisional: false))
        for status: AuthorizationStatus in [.provisional, .ephemeral] {
            #expect(flow.next(status: status, intent: .appLaunched).step == .none)
            #expect(flow.next(status: status, intent: .momentOfValue).step == .showPrePermission)
            #expect(
                flow.next(status: status, intent: .prePermissionAccepted).step
                    == .requestSystemPrompt(provisional: false))
        }
    }

    @Test(
        "the prompter runs the flow on the center: a moment of value shows the explanation; its yes prompts once; its no is remembered across launches (no prompt, cooldown); denied + the user's request opens Settings, never the prompt"
    )
    func prompter() async {
        let store = InMemoryKeyValueStore()
        let clock = ManualKitClock(now)
        let center = FakeNotificationCenter(status: .notDetermined, answer: .authorized)
        let settings = FakeRegistrar()
        let explained = Counter()
        let prompter = PermissionPrompter(center: center, settings: settings, store: store, clock: clock)
        #expect(
            await prompter.handle(.appLaunched) {
                await explained.add()
                return true
            } == .notDetermined)
        #expect(await explained.value == 0 && center.promptsShown == 0)
        // No: remembered by a prompter made at the next launch.
        #expect(
            await prompter.handle(.momentOfValue) {
                await explained.add()
                return false
            } == .notDetermined)
        let relaunched = PermissionPrompter(center: center, settings: settings, store: store, clock: clock)
        #expect(relaunched.history.declines == 1)
        #expect(
            await relaunched.handle(.momentOfValue) {
                await explained.add()
                return true
            } == .notDetermined)
        #expect(await explained.value == 1 && center.promptsShown == 0)
        // After the cooldown: yes, then the system prompt, once.
        clock.advance(by: 8 * 86_400)
        #expect(
            await relaunched.handle(.momentOfValue) {
                await explained.add()
                return true
            } == .authorized)
        #expect(await explained.value == 2 && center.promptsShown == 1)
        #expect(await relaunched.handle(.momentOfValue) { true } == .authorized && center.promptsShown == 1)

        let denied = FakeNotificationCenter(status: .denied)
        let deniedPrompter = PermissionPrompter(
            center: denied, settings: settings, store: InMemoryKeyValueStore(), clock: clock)
        #expect(await deniedPrompter.handle(.momentOfValue) { true } == .denied)
        #expect(await deniedPrompter.handle(.userAskedToEnable) == .denied)
        #expect(settings.settingsOpened == 1 && denied.promptsShown == 0)
    }

    @Test(
        "launch asks the OS for the token, registers Herald's categories merged with the app's own (offline: the last good copy), and answers the status"
    )
    func launch() async throws {
        let transport = RecordingTransport()
        transport.answer(
            .status(
                200,
                #"{"categories":[{"id":"approval","types":["approval"],"actions":[{"id":"APPROVE","title":"Approve","authentication_required":false,"destructive":false,"text_input":false}]}],"types":[{"type":"approval","category":"approval","stakes":"high"}]}"#
            ),
            then: .offline)
        let store = InMemoryKeyValueStore()
        let client = HeraldClient(
            configuration: HeraldKitConfiguration(appID: "cocotte", clientKey: "k", environment: .sandbox),
            transport: transport, store: store)
        let center = FakeNotificationCenter(status: .provisional)
        let registrar = FakeRegistrar()
        let own = CategorySpec(id: "reply", actions: [ActionSpec(id: "REPLY", title: "Reply", textInput: true)])
        #expect(await client.launch(center: center, registrar: registrar, ownCategories: [own]) == .provisional)
        #expect(registrar.registrationsAsked == 1)
        #expect(center.categories.map(\.id) == ["approval", "reply"])
        #expect(center.categories.first?.actions.first?.authenticationRequired == true)  // high stakes
        let offline = FakeNotificationCenter(status: .authorized)
        #expect(await client.launch(center: offline, registrar: registrar) == .authorized)
        #expect(offline.categories.map(\.id) == ["approval"] && registrar.registrationsAsked == 2)
    }

    @Test("JSONValue.anyValue is what a local notification's userInfo holds; JSONValue(any:) reads it back the same")
    func anyValueRoundTrip() {
        let value: JSONValue = [
            "type": "trial_nudge", "n": 3, "ratio": 0.5, "on": true, "none": nil, "steps": ["a", 1],
        ]
        #expect(JSONValue(any: value.anyValue) == value)
    }
}

/// Counts from `@Sendable` closures.
actor Counter {
    private(set) var value = 0
    func add() { value += 1 }
}
