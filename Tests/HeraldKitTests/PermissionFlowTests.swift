import Foundation
import HeraldKit
import Testing

/// K4's permission flow as a pure function.
@Suite("HeraldKit permission flow")
struct PermissionFlowTests {
    let flow = PermissionFlow()
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("nothing at launch by default; the explanation after a moment of value; its yes asks the system")
    func moment() {
        #expect(flow.next(status: .notDetermined, intent: .appLaunched).step == .none)
        #expect(flow.next(status: .notDetermined, intent: .momentOfValue).step == .showPrePermission)
        #expect(flow.next(status: .notDetermined, intent: .prePermissionAccepted).step == .requestSystemPrompt(provisional: false))
        #expect(PermissionFlow(policy: .init(provisionalAtLaunch: true)).next(status: .notDetermined, intent: .appLaunched).step
            == .requestSystemPrompt(provisional: true))
        #expect(PermissionFlow(policy: .init(offerAtLaunch: true)).next(status: .notDetermined, intent: .appLaunched).step == .showPrePermission)
    }

    @Test("denied never re-asks: only the user's own request leads to Settings")
    func denied() {
        for intent: PermissionIntent in [.appLaunched, .momentOfValue, .prePermissionAccepted] {
            #expect(flow.next(status: .denied, intent: intent).step == .none, "\(intent)")
        }
        #expect(flow.next(status: .denied, intent: .userAskedToEnable).step == .openSettings)
        #expect(flow.next(status: .authorized, intent: .userAskedToEnable).step == .none)
    }

    @Test("a declined explanation waits the cooldown and stops after the policy's declines; provisional and ephemeral are upgraded on interest only")
    func declinesAndQuietStates() {
        let (step, history) = flow.next(status: .notDetermined, intent: .prePermissionDeclined, now: now)
        #expect(step == .none && history.declines == 1)
        #expect(flow.next(status: .notDetermined, intent: .momentOfValue, history: history, now: now.addingTimeInterval(86_400)).step == .none)
        #expect(flow.next(status: .notDetermined, intent: .momentOfValue, history: history, now: now.addingTimeInterval(8 * 86_400)).step == .showPrePermission)
        let twice = PermissionFlow.History(declines: 2, lastDeclinedAt: now)
        #expect(flow.next(status: .notDetermined, intent: .momentOfValue, history: twice, now: now.addingTimeInterval(365 * 86_400)).step == .none)
        #expect(flow.next(status: .notDetermined, intent: .userAskedToEnable, history: twice).step == .requestSystemPrompt(provisional: false))
        for status: AuthorizationStatus in [.provisional, .ephemeral] {
            #expect(flow.next(status: status, intent: .appLaunched).step == .none)
            #expect(flow.next(status: status, intent: .momentOfValue).step == .showPrePermission)
            #expect(flow.next(status: status, intent: .prePermissionAccepted).step == .requestSystemPrompt(provisional: false))
        }
    }
}
