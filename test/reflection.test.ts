import { create, createFileRegistry, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, type FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ServerReflection,
  ServerReflectionRequestSchema,
  type ServerReflectionResponse,
} from "../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1alpha } from "../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { answerReflectionRequest, createReflectionIndex, servedServices } from "../src/server/index.js";
import { startTestServer, type TestServer } from "./support/server.js";

type Request = MessageInitShape<typeof ServerReflectionRequestSchema>;

/** The decoded file descriptors of a file_descriptor_response; throws on any other answer. */
function descriptors(response: Pick<ServerReflectionResponse, "messageResponse">): FileDescriptorProto[] {
  if (response.messageResponse.case !== "fileDescriptorResponse") {
    throw new Error(
      `expected file descriptors, got ${response.messageResponse.case}: ${JSON.stringify(response.messageResponse.value)}`,
    );
  }
  return response.messageResponse.value.fileDescriptorProto.map((bytes) =>
    fromBinary(FileDescriptorProtoSchema, bytes),
  );
}

/** The error_response of an answer; throws on any other answer. */
function errorOf(response: Pick<ServerReflectionResponse, "messageResponse">): {
  errorCode: number;
  errorMessage: string;
} {
  if (response.messageResponse.case !== "errorResponse")
    throw new Error(`expected an error, got ${response.messageResponse.case}`);
  return response.messageResponse.value;
}

describe("reflection answers built directly", () => {
  const index = createReflectionIndex(servedServices);
  const ask = (request: Request, sent?: Set<string>) =>
    answerReflectionRequest(index, create(ServerReflectionRequestSchema, request), sent);

  it("lists every served service, reflection included, and echoes host and request", () => {
    const response = ask({ host: "example:1", messageRequest: { case: "listServices", value: "" } });
    expect(response.validHost).toBe("example:1");
    expect(response.originalRequest?.messageRequest.case).toBe("listServices");
    expect(
      response.messageResponse.case === "listServicesResponse" &&
        response.messageResponse.value.service.map((service) => service.name),
    ).toEqual([
      "sandbox.v1.SandboxService",
      "sandbox.v1.FileService",
      "process.v1.ProcessService",
      "grpc.health.v1.Health",
      "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection",
    ]);
  });

  it("answers a symbol with its file and every import, enough to rebuild the service", () => {
    const files = descriptors(
      ask({ messageRequest: { case: "fileContainingSymbol", value: "sandbox.v1.SandboxService" } }),
    );
    expect(files.map((file) => file.name)).toEqual([
      "sandbox/v1/sandbox.proto",
      "google/protobuf/duration.proto",
      "google/protobuf/timestamp.proto",
    ]);
    const byName = new Map(files.map((file) => [file.name, file]));
    const registry = createFileRegistry(files[0], (name) => byName.get(name));
    expect(
      registry.getService("sandbox.v1.SandboxService")?.methods.map((method) => [method.name, method.methodKind]),
    ).toEqual([
      ["Exec", "server_streaming"],
      ["StartProcess", "unary"],
      ["StreamLogs", "server_streaming"],
      ["SendInput", "bidi_streaming"],
      ["GetProcess", "unary"],
      ["ListProcesses", "unary"],
      ["KillProcess", "unary"],
      ["KillAllProcesses", "unary"],
      ["CleanupProcesses", "unary"],
      ["GetProcessLogs", "unary"],
      ["WaitForPort", "unary"],
      ["WaitForLog", "unary"],
      ["WaitForExit", "unary"],
      ["ListPorts", "unary"],
    ]);
    expect(registry.getMessage("sandbox.v1.ProcessExited")?.field.startTime.message?.typeName).toBe(
      "google.protobuf.Timestamp",
    );
  });

  it("sends each import once per stream", () => {
    const sent = new Set<string>();
    expect(
      descriptors(ask({ messageRequest: { case: "fileContainingSymbol", value: "sandbox.v1.ExecRequest" } }, sent)),
    ).toHaveLength(3);
    const again = descriptors(
      ask({ messageRequest: { case: "fileContainingSymbol", value: "sandbox.v1.ProcessInfo" } }, sent),
    );
    expect(again.map((file) => file.name)).toEqual(["sandbox/v1/sandbox.proto"]);
  });

  it("finds the file of methods, fields, oneofs, enum values, nested enums and files by name", () => {
    for (const symbol of [
      "sandbox.v1.SandboxService.Exec",
      "sandbox.v1.ExecRequest.spec",
      "sandbox.v1.ExecResponse.event",
      "sandbox.v1.PROCESS_STATUS_RUNNING",
      "sandbox.v1.ProcessStatus",
    ]) {
      expect(
        descriptors(ask({ messageRequest: { case: "fileContainingSymbol", value: symbol } }))[0].name,
        symbol,
      ).toBe("sandbox/v1/sandbox.proto");
    }
    expect(
      descriptors(
        ask({
          messageRequest: { case: "fileContainingSymbol", value: "grpc.health.v1.HealthCheckResponse.ServingStatus" },
        }),
      )[0].name,
    ).toBe("grpc/health/v1/health.proto");
    expect(
      descriptors(ask({ messageRequest: { case: "fileByFilename", value: "google/protobuf/timestamp.proto" } }))[0]
        .package,
    ).toBe("google.protobuf");
  });

  it("answers NOT_FOUND in the stream for unknown symbols, files, types and extensions", () => {
    expect(errorOf(ask({ messageRequest: { case: "fileContainingSymbol", value: "sandbox.v1.Nope" } }))).toMatchObject({
      errorCode: Code.NotFound,
      errorMessage: "symbol not found: sandbox.v1.Nope",
    });
    for (const symbol of [
      "sandbox.v1.SandboxService.Nope",
      "sandbox.v1.ExecRequest.nope",
      "sandbox.v1.ProcessStatus.PROCESS_STATUS_RUNNING",
      "",
      ".",
    ]) {
      expect(errorOf(ask({ messageRequest: { case: "fileContainingSymbol", value: symbol } })).errorCode, symbol).toBe(
        Code.NotFound,
      );
    }
    expect(errorOf(ask({ messageRequest: { case: "fileByFilename", value: "nope.proto" } })).errorMessage).toBe(
      "file not found: nope.proto",
    );
    expect(
      errorOf(ask({ messageRequest: { case: "allExtensionNumbersOfType", value: "sandbox.v1.Nope" } })).errorCode,
    ).toBe(Code.NotFound);
    expect(
      errorOf(
        ask({
          messageRequest: {
            case: "fileContainingExtension",
            value: { containingType: "sandbox.v1.ExecRequest", extensionNumber: 100 },
          },
        }),
      ).errorCode,
    ).toBe(Code.NotFound);
    expect(errorOf(ask({}))).toMatchObject({
      errorCode: Code.InvalidArgument,
      errorMessage: "empty reflection request",
    });
  });

  it("lists no extension numbers for a message nobody extends", () => {
    const response = ask({ messageRequest: { case: "allExtensionNumbersOfType", value: "sandbox.v1.ExecRequest" } });
    expect(
      response.messageResponse.case === "allExtensionNumbersResponse" && response.messageResponse.value,
    ).toMatchObject({
      baseTypeName: "sandbox.v1.ExecRequest",
      extensionNumber: [],
    });
  });
});

describe("reflection over gRPC against a real server", () => {
  let test: TestServer;

  beforeAll(async () => {
    test = await startTestServer();
  });
  afterAll(async () => {
    await test.close();
  });

  for (const service of [ServerReflection, ServerReflectionV1alpha]) {
    it(`answers several questions on one ${service.typeName} stream, in order`, async () => {
      const client = test.connect(service);
      async function* questions() {
        yield { messageRequest: { case: "listServices" as const, value: "" } };
        yield {
          messageRequest: { case: "fileContainingSymbol" as const, value: "sandbox.v1.SandboxService.SendInput" },
        };
        yield { messageRequest: { case: "fileContainingSymbol" as const, value: "sandbox.v1.NoSuchService" } };
        yield { messageRequest: { case: "fileByFilename" as const, value: "grpc/health/v1/health.proto" } };
      }
      const answers: Pick<ServerReflectionResponse, "messageResponse">[] = [];
      for await (const answer of client.serverReflectionInfo(questions()))
        answers.push(answer as Pick<ServerReflectionResponse, "messageResponse">);
      expect(answers.map((answer) => answer.messageResponse.case)).toEqual([
        "listServicesResponse",
        "fileDescriptorResponse",
        "errorResponse",
        "fileDescriptorResponse",
      ]);
      expect(descriptors(answers[1]).map((file) => file.name)).toEqual([
        "sandbox/v1/sandbox.proto",
        "google/protobuf/duration.proto",
        "google/protobuf/timestamp.proto",
      ]);
      expect(errorOf(answers[2])).toMatchObject({
        errorCode: Code.NotFound,
        errorMessage: "symbol not found: sandbox.v1.NoSuchService",
      });
      expect(descriptors(answers[3]).map((file) => file.name)).toEqual(["grpc/health/v1/health.proto"]);
    });
  }
});
