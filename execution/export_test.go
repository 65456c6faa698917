package execution

// NotifyChannelForTest is the channel on which freed slots are announced.
const NotifyChannelForTest = notifyChannel

// ForceLockClassForTest is the first key of the lock that orders forces and cleanup batches.
const ForceLockClassForTest = forceLockClass
