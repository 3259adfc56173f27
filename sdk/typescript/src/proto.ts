// The sigx.actors.v1 wire contract, loaded at run time from the repository's proto/ folder with
// @grpc/proto-loader (one source of truth: no generated code to go stale).
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';

/** The proto/ include dir: $SIGX_PROTO_DIR, else the repository's (dist/ → ../../../proto). */
function protoDir(): string {
  if (process.env.SIGX_PROTO_DIR) return process.env.SIGX_PROTO_DIR;
  const here = dirname(fileURLToPath(import.meta.url));
  const dir = resolve(here, '..', '..', '..', 'proto');
  if (!existsSync(join(dir, 'sigx/actors/v1/app.proto'))) {
    throw new Error(`no sigx protos in ${dir}: set SIGX_PROTO_DIR to the folder holding sigx/actors/v1/app.proto`);
  }
  return dir;
}

const PROTO = protoDir();
const definition = protoLoader.loadSync(['sigx/actors/v1/app.proto'], {
  includeDirs: [PROTO],
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const v1 = (grpc.loadPackageDefinition(definition) as any).sigx.actors.v1;

/** The generated-at-load-time client constructor for `sigx.actors.v1.ActorHost`. */
export const ActorHostClient: grpc.ServiceClientConstructor = v1.ActorHost;

const root = new protobuf.Root();
root.resolvePath = (_origin, target) => join(PROTO, target);
root.loadSync(['google/rpc/status.proto', 'sigx/actors/v1/errors.proto']);
export const RpcStatusType = root.lookupType('google.rpc.Status');
export const ErrorDetailType = root.lookupType('sigx.actors.v1.ErrorDetail');
