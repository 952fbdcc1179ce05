import {
  create,
  createFileRegistry,
  fromBinary,
  toBinary,
  type DescFile,
  type DescService,
  type FileRegistry,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import {
  type ServerReflection,
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "../../../gen/grpc/reflection/v1/reflection_pb.js";
import {
  type ServerReflection as ServerReflectionV1alpha,
  ServerReflectionRequestSchema as ServerReflectionRequestV1alphaSchema,
  ServerReflectionResponseSchema as ServerReflectionResponseV1alphaSchema,
  type ServerReflectionRequest as ServerReflectionRequestV1alpha,
} from "../../../gen/grpc/reflection/v1alpha/reflection_pb.js";

/**
 * What reflection knows: the served services and a file registry of every file that declares them,
 * with all their transitive imports (google/protobuf/timestamp.proto and the like).
 */
export interface ReflectionIndex {
  /** Fully qualified names of the served services, in the order given. */
  readonly serviceNames: readonly string[];
  /** Every file of the served services and their imports. */
  readonly registry: FileRegistry;
}

/**
 * Builds the {@link ReflectionIndex} of the given services, plus `files` that no service imports but
 * a client needs to read the answers (the error details' `google.rpc.ErrorInfo`).
 */
export function createReflectionIndex(
  services: readonly DescService[],
  files: readonly DescFile[] = [],
): ReflectionIndex {
  // A FileDescriptorSet lists imports before the files that import them.
  const ordered: DescFile[] = [];
  const seen = new Set<string>();
  const visit = (file: DescFile) => {
    if (seen.has(file.proto.name)) return;
    seen.add(file.proto.name);
    for (const dependency of file.dependencies) visit(dependency);
    ordered.push(file);
  };
  for (const service of services) visit(service.file);
  for (const file of files) visit(file);
  const registry = createFileRegistry(create(FileDescriptorSetSchema, { file: ordered.map((file) => file.proto) }));
  return { serviceNames: services.map((service) => service.typeName), registry };
}

/**
 * Answers one reflection request. `sentFiles` holds the names of the files already sent on this
 * stream: a file's imports are sent along with it unless sent before, as grpc-go does, so a client
 * gets everything it needs to build descriptors without asking twice. Errors are answered in the
 * stream as an `error_response` with a gRPC status code, as the protocol says, never as a failed
 * call: NOT_FOUND for an unknown symbol, file or extension, INVALID_ARGUMENT for an empty request.
 */
export function answerReflectionRequest(
  index: ReflectionIndex,
  request: ServerReflectionRequest,
  sentFiles: Set<string> = new Set(),
): ServerReflectionResponse {
  const respond = (messageResponse: MessageInitShape<typeof ServerReflectionResponseSchema>["messageResponse"]) =>
    create(ServerReflectionResponseSchema, { validHost: request.host, originalRequest: request, messageResponse });
  const fail = (code: Code, message: string) =>
    respond({ case: "errorResponse", value: { errorCode: code, errorMessage: message } });
  const files = (file: DescFile | undefined, notFound: string) =>
    file === undefined
      ? fail(Code.NotFound, notFound)
      : respond({ case: "fileDescriptorResponse", value: { fileDescriptorProto: withImports(file, sentFiles) } });
  const { registry } = index;
  const query = request.messageRequest;
  switch (query.case) {
    case "listServices":
      return respond({
        case: "listServicesResponse",
        value: { service: index.serviceNames.map((name) => ({ name })) },
      });
    case "fileByFilename":
      return files(registry.getFile(query.value), `file not found: ${query.value}`);
    case "fileContainingSymbol":
      return files(fileOfSymbol(registry, query.value), `symbol not found: ${query.value}`);
    case "fileContainingExtension": {
      const extendee = registry.getMessage(query.value.containingType);
      const extension = extendee && registry.getExtensionFor(extendee, query.value.extensionNumber);
      return files(
        extension?.file,
        `extension not found: ${query.value.containingType} ${query.value.extensionNumber}`,
      );
    }
    case "allExtensionNumbersOfType": {
      const typeName = query.value;
      if (registry.getMessage(typeName) === undefined) return fail(Code.NotFound, `type not found: ${typeName}`);
      const extensionNumber: number[] = [];
      for (const desc of registry) {
        if (desc.kind === "extension" && desc.extendee.typeName === typeName) extensionNumber.push(desc.number);
      }
      return respond({ case: "allExtensionNumbersResponse", value: { baseTypeName: typeName, extensionNumber } });
    }
    default:
      return fail(Code.InvalidArgument, "empty reflection request");
  }
}

/**
 * The file declaring a type, a service, or a member of one: a method, a field, a oneof, or an enum
 * value (whose full name is in the scope enclosing its enum, `sandbox.v1.PROCESS_STATUS_RUNNING`).
 */
function fileOfSymbol(registry: FileRegistry, symbol: string): DescFile | undefined {
  const direct = registry.get(symbol);
  if (direct !== undefined) return direct.file;
  const dot = symbol.lastIndexOf(".");
  const scope = dot < 0 ? "" : symbol.slice(0, dot);
  const member = symbol.slice(dot + 1);
  const parent = registry.get(scope);
  if (parent?.kind === "service" && parent.methods.some((method) => method.name === member)) return parent.file;
  if (
    parent?.kind === "message" &&
    (parent.fields.some((field) => field.name === member) || parent.oneofs.some((oneof) => oneof.name === member))
  ) {
    return parent.file;
  }
  for (const desc of registry) {
    if (desc.kind !== "enum" || !desc.values.some((value) => value.name === member)) continue;
    const enclosing = desc.parent?.typeName ?? desc.file.proto.package;
    if (enclosing === scope) return desc.file;
  }
  return undefined;
}

/** The serialized file followed by those of its transitive imports not yet in `sentFiles`. */
function withImports(file: DescFile, sentFiles: Set<string>): Uint8Array[] {
  const out: Uint8Array[] = [toBinary(FileDescriptorProtoSchema, file.proto)];
  sentFiles.add(file.proto.name);
  const pending = [...file.dependencies];
  while (pending.length > 0) {
    const next = pending.shift()!;
    if (sentFiles.has(next.proto.name)) continue;
    sentFiles.add(next.proto.name);
    out.push(toBinary(FileDescriptorProtoSchema, next.proto));
    pending.push(...next.dependencies);
  }
  return out;
}

/**
 * Creates `grpc.reflection.v1.ServerReflection`, answering from `index`. Each request of the stream
 * is answered in order before the next is read: reflection is strictly one answer per question, so
 * there is nothing to pump apart, and a client that stops asking holds no work on the server.
 */
export function createReflectionService(index: ReflectionIndex): ServiceImpl<typeof ServerReflection> {
  return {
    async *serverReflectionInfo(requests) {
      const sentFiles = new Set<string>();
      for await (const request of requests) yield answerReflectionRequest(index, request, sentFiles);
    },
  };
}

/**
 * Creates `grpc.reflection.v1alpha.ServerReflection` for older tools. Its messages are the same on
 * the wire as v1's, so each request is answered by the v1 code through a binary round trip.
 */
export function createReflectionServiceV1alpha(index: ReflectionIndex): ServiceImpl<typeof ServerReflectionV1alpha> {
  return {
    async *serverReflectionInfo(requests) {
      const sentFiles = new Set<string>();
      for await (const request of requests) {
        const asV1 = fromBinary(
          ServerReflectionRequestSchema,
          toBinary(ServerReflectionRequestV1alphaSchema, request as ServerReflectionRequestV1alpha),
        );
        const answer = answerReflectionRequest(index, asV1, sentFiles);
        yield fromBinary(ServerReflectionResponseV1alphaSchema, toBinary(ServerReflectionResponseSchema, answer));
      }
    },
  };
}
