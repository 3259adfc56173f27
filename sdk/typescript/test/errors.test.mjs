// Each ErrorDetail kind decodes to its own class (ActorError at the root); a status without a
// detail is a transport failure: outcome-unknown unless it proves the call never ran.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import * as sdk from '../dist/index.js';
import { ErrorDetailType, RpcStatusType } from '../dist/proto.js';

function serviceError(code, detail) {
  const metadata = new grpc.Metadata();
  if (detail) {
    const any = { type_url: 'type.googleapis.com/sigx.actors.v1.ErrorDetail', value: ErrorDetailType.encode(ErrorDetailType.fromObject(detail)).finish() };
    metadata.set('grpc-status-details-bin', Buffer.from(RpcStatusType.encode(RpcStatusType.fromObject({ code, message: detail.message, details: [any] })).finish()));
  }
  return Object.assign(new Error('x'), { code, details: detail?.message ?? 'Connection dropped', metadata });
}

const VECTORS = [
  [1, 'fenced', sdk.FencedError], [2, 'unplaceable', sdk.UnplaceableError], [3, 'unreachable', sdk.UnreachableError],
  [4, 'wrong-host', sdk.WrongHostError], [5, 'timeout', sdk.TimeoutError], [6, 'app', sdk.AppError],
  [7, 'activation', sdk.ActivationError], [8, 'invalid', sdk.InvalidError], [9, 'unauthenticated', sdk.UnauthenticatedError],
  [10, 'outcome-unknown', sdk.OutcomeUnknownError], [11, 'stale-epoch', sdk.StaleEpochError], [0, 'outcome-unknown', sdk.OutcomeUnknownError],
];

test('every kind decodes to its class', () => {
  for (const [n, kind, Cls] of VECTORS) {
    const e = sdk.fromServiceError(serviceError(2, { kind: n, message: `m${n}` }), 't');
    assert.ok(e instanceof Cls, `${n} → ${e.constructor.name}`);
    assert.ok(e instanceof sdk.ActorError);
    assert.equal(e.kind, kind);
    assert.equal(e.message, `m${n}`);
  }
});

test('wrong-host keeps its owner hint and retry-after; activation keeps its cause', () => {
  const wh = sdk.fromServiceError(serviceError(9, { kind: 4, message: 'w', ownerHint: 'h2', retryAfterMs: 50 }), 't');
  assert.equal(wh.ownerHint, 'h2');
  assert.equal(wh.retryAfterMs, 50);
  const act = sdk.fromServiceError(serviceError(14, { kind: 7, message: 'gave up', cause: { kind: 2, message: 'none' } }), 't');
  assert.ok(act.cause instanceof sdk.UnplaceableError);
});

test('no detail: a dropped connection is outcome-unknown, a failed dial unreachable', () => {
  assert.ok(sdk.fromServiceError(serviceError(14), 't') instanceof sdk.OutcomeUnknownError);
  assert.ok(sdk.fromServiceError(serviceError(13), 't') instanceof sdk.OutcomeUnknownError);
  const dial = Object.assign(serviceError(14), { details: 'No connection established. Last error: connect ENOENT' });
  assert.ok(sdk.fromServiceError(dial, 't') instanceof sdk.UnreachableError);
});
