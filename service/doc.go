// Package service exposes spendgate over NATS request-reply as a NATS micro
// service named "spendgate": JSON in and out, failures as
// {"error":{"code","message"}} with the stable codes of package events.
// `nats micro info spendgate` lists its endpoints.
package service
