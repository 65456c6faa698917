// Package tasklingtype holds the types of what taskling reads back — tasks and their slots,
// executions and their events, submissions, blocks, operator changes, schedule events — once,
// for every layer: the storage scans rows into them, package taskling returns them (it declares
// each under the same name: taskling.ExecutionInfo is tasklingtype.ExecutionInfo), and the HTTP
// API and the CLI print them. It imports nothing of the module, so any layer may use it, as
// River's rivertype is shared by River's client, drivers and UI.
//
// Most programs never name this package: use the names package taskling gives these types.
package tasklingtype
