// Package demo is `spendgate demo overrun`: with nothing set up, it shows
// the same burst of concurrent priced calls land past a ceiling through a
// check-then-act ledger and stop at it through spendgate, and then four
// ways a ledger fails open (check-then-act under concurrency, post-hoc
// accounting, best-effort recording, an unpriced model costed at zero),
// each against a naive ledger and through spendgate, ending with an audit
// of spendgate's book of record.
//
// Overrun runs it all on an embedded NATS server and returns a Report;
// Report.Print writes it as text, and the Report marshals to JSON.
package demo
