// Error classes per sigx error kind (errors.proto), with `ActorError` at the root.
//
// Every failed call the sidecar answers carries a google.rpc.Status in
// `grpc-status-details-bin` whose detail is one `sigx.actors.v1.ErrorDetail`; `fromServiceError`
// decodes it into the class for its kind, so callers branch with `instanceof`, never on messages.
// A transport failure with the call in flight is `OutcomeUnknownError`: it may or may not have run.
import type { ServiceError } from '@grpc/grpc-js';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { ErrorDetailType, RpcStatusType } from './proto.js';

/** The stable kinds, in the spelling of `sigx-error-kind` (lower-case, dashed). */
export type ErrorKind =
  | 'fenced'
  | 'unplaceable'
  | 'unreachable'
  | 'wrong-host'
  | 'timeout'
  | 'app'
  | 'activation'
  | 'invalid'
  | 'unauthenticated'
  | 'outcome-unknown'
  | 'stale-epoch';

/** What the sidecar said beyond the message, when it said it. */
export interface ErrorInfo {
  /** For `wrong-host`: the host that owns the actor, when known. */
  ownerHint?: string;
  /** When set, the answer is transient: retry after this many milliseconds. */
  retryAfterMs?: number;
  /** For `activation`: the last answer that made routing give up. */
  cause?: ActorError;
}

/** The root of every sigx error. `kind` is the stable name; the subclass says the same. */
export class ActorError extends Error {
  readonly kind: ErrorKind;
  readonly ownerHint?: string;
  readonly retryAfterMs?: number;
  constructor(kind: ErrorKind, message: string, info: ErrorInfo = {}) {
    super(message, info.cause ? { cause: info.cause } : undefined);
    this.kind = kind;
    this.name = new.target.name;
    if (info.ownerHint) this.ownerHint = info.ownerHint;
    if (info.retryAfterMs) this.retryAfterMs = info.retryAfterMs;
  }
}

/** This host fenced itself; terminal until it restarts. */
export class FencedError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('fenced', message, info); }
}
/** No active host registers the type. */
export class UnplaceableError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('unplaceable', message, info); }
}
/** The target could not be reached; the call never ran, so retrying is safe. */
export class UnreachableError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('unreachable', message, info); }
}
/** The target does not hold or accept this actor; the call never ran. */
export class WrongHostError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('wrong-host', message, info); }
}
/** The call's deadline passed; a late result is discarded. */
export class TimeoutError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('timeout', message, info); }
}
/** The actor's own failure; its message is passed through unchanged. */
export class AppError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('app', message, info); }
}
/** Routing retries were spent; `cause` holds the last answer. */
export class ActivationError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('activation', message, info); }
}
/** Bad input: unknown type or method, oversize payload, undecodable argument, ... */
export class InvalidError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('invalid', message, info); }
}
/** A mesh peer failed the HMAC / mTLS check. */
export class UnauthenticatedError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('unauthenticated', message, info); }
}
/** The connection died with the call in flight: it may or may not have run. Never retried. */
export class OutcomeUnknownError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('outcome-unknown', message, info); }
}

/** The turn ran on an activation a newer one had superseded: the state store refused its writes
 * (none is stored) and the activation was dropped. Effects outside the store may have happened. */
export class StaleEpochError extends ActorError {
  constructor(message: string, info?: ErrorInfo) { super('stale-epoch', message, info); }
}

type Ctor = new (message: string, info?: ErrorInfo) => ActorError;
/** errors.proto's numbers → classes. Unspecified (0) and unknown numbers read as outcome-unknown. */
const BY_NUMBER: Record<number, Ctor> = {
  1: FencedError,
  2: UnplaceableError,
  3: UnreachableError,
  4: WrongHostError,
  5: TimeoutError,
  6: AppError,
  7: ActivationError,
  8: InvalidError,
  9: UnauthenticatedError,
  10: OutcomeUnknownError,
  11: StaleEpochError,
};

/** The wire enum name of a kind, for TurnError answers. */
export function kindEnumName(kind: ErrorKind): string {
  return 'ERROR_KIND_' + kind.toUpperCase().replace('-', '_');
}

interface DetailMsg {
  kind?: number;
  message?: string;
  ownerHint?: string;
  retryAfterMs?: number | string;
  cause?: DetailMsg | null;
}

/** Builds the error for one decoded ErrorDetail (recursively for `cause`). */
export function fromDetail(d: DetailMsg): ActorError {
  const Cls = BY_NUMBER[d.kind ?? 0] ?? OutcomeUnknownError;
  const info: ErrorInfo = {};
  if (d.ownerHint) info.ownerHint = d.ownerHint;
  if (d.retryAfterMs) info.retryAfterMs = Number(d.retryAfterMs);
  if (d.cause) info.cause = fromDetail(d.cause);
  return new Cls(d.message ?? '', info);
}

/**
 * Reads a failed RPC to the local sidecar. A status with a sigx ErrorDetail decodes as its kind.
 * Without one, the transport failed: a dial that never connected is `unreachable` (the call did
 * not run), our own deadline is `timeout`, and anything else is `outcome-unknown` — the request
 * may have reached the sidecar and run.
 */
export function fromServiceError(err: ServiceError, target: string): ActorError {
  const [bin] = err.metadata?.get('grpc-status-details-bin') ?? [];
  if (bin && typeof bin !== 'string') {
    try {
      const st = RpcStatusType.decode(bin) as unknown as { details: { typeUrl?: string; type_url?: string; value: Uint8Array }[] };
      for (const any of st.details ?? []) {
        // google.protobuf.Any keeps its proto field name (type_url) in protobufjs.
        if ((any.type_url ?? any.typeUrl ?? '').endsWith('/sigx.actors.v1.ErrorDetail')) {
          const d = ErrorDetailType.toObject(ErrorDetailType.decode(any.value), { longs: Number }) as DetailMsg;
          return fromDetail(d);
        }
      }
    } catch {
      // fall through to the transport reading below
    }
  }
  if (err.code === GrpcStatus.UNAVAILABLE && /No connection established|ECONNREFUSED|ENOENT/.test(err.details)) {
    return new UnreachableError(
      `cannot reach the sidecar at ${target} (${err.details}); is it running, and does SIGX_SOCKET ` +
        'name its socket? The call did not run: retrying it is safe',
    );
  }
  if (err.code === GrpcStatus.DEADLINE_EXCEEDED) {
    return new TimeoutError(`the call's deadline passed before the sidecar answered (${err.details})`);
  }
  return new OutcomeUnknownError(
    `the connection to the sidecar at ${target} failed with the call in flight ` +
      `(${GrpcStatus[err.code] ?? err.code}: ${err.details}); it may or may not have run`,
  );
}
