// Package events is spendgate's domain root: the money type, identifiers,
// budgets and periods, the versioned events that make up the book of record,
// the wire requests and replies, and the error codes that cross the wire.
//
// It imports nothing else of spendgate. Every other package imports it.
//
// Money never touches a float: amounts are apd decimals, parsed from plain
// decimal strings under hard limits (see ParseMoney) and written back as
// canonical decimal strings.
package events
