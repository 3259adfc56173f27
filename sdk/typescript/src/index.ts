// sigx for TypeScript: define actor and worker types, serve them on the sidecar, call them.
export { defineActor, defineWorker } from './define.js';
export type {
  ActorContext, ActorDefinition, ActorSpec, CallOptions, Locality, ClientOf, DeactivateReason,
  WorkerContext, WorkerDefinition, WorkerSpec,
} from './define.js';
export { defineActorApp, Backoff } from './app.js';
export type { ActorApp, AppSpec, ServeOptions } from './app.js';
export { Client, defaultTarget } from './client.js';
export type { ActorLocation, HostDescriptor, ListActorsPage, MembersFilter, MembersView } from './client.js';
export { Dispatcher, systemClock } from './dispatcher.js';
export type { Clock, WireResult, WireTurn } from './dispatcher.js';
export { Storage } from './storage.js';
export type { StateReader, ReadStateRequest, WireEntry, WireWrite } from './storage.js';
export * from './errors.js';
export { Reminders } from './reminders.js';
export { Timers } from './timers.js';
export { currentTrace, withTrace } from './trace.js';
export type { TraceContext } from './trace.js';
export type { TimerApi, TimerOptions, TimerTick } from './timers.js';
export type { Reminder, ReminderApi, ReminderDue, ReminderFence, ReminderInfo, ReminderOptions } from './reminders.js';
