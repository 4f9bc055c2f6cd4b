// Apple adapter: compiles only where ActivityKit exists (iOS 17.2+ for push-to-start); Linux
// CI does not build it. Glue only: reporting, dedupe and retries are `ActivityTokens`'.
#if canImport(ActivityKit) && os(iOS)
    public import ActivityKit

    @available(iOS 17.2, *)
    extension ActivityTokens {
        /// Follows ActivityKit for `Attributes`: its push-to-start tokens, and the update tokens
        /// of every activity of the type — those running now and those that start, whether the
        /// app or a push started them. `activityID` maps ActivityKit's id of an activity to the
        /// id the app's backend uses with Herald (by default the same). Call it once at launch.
        @MainActor
        public func follow<Attributes: ActivityAttributes>(
            _ type: Attributes.Type, activityID: @escaping @Sendable (String) -> String = { $0 }
        ) {
            let name = String(describing: Attributes.self)
            let tokens = self
            Task { await tokens.followPushToStart(attributesType: name, Activity<Attributes>.pushToStartTokenUpdates) }
            Task { @MainActor in
                var following = Set<String>()
                func watch(_ activity: Activity<Attributes>) {
                    guard following.insert(activity.id).inserted else { return }
                    let id = activityID(activity.id)
                    let updates = activity.pushTokenUpdates
                    Task { await tokens.followActivity(id, attributesType: name, updates) }
                }
                for activity in Activity<Attributes>.activities { watch(activity) }
                for await activity in Activity<Attributes>.activityUpdates { watch(activity) }
            }
        }
    }
#endif
