package execution

// NotifyChannelForTest is the channel on which freed slots are announced.
const NotifyChannelForTest = NotifyChannel
