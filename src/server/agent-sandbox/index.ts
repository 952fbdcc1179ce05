export {
  createProcessService,
  droppedBytesTrailers,
  maxExecuteOutputBytes,
  newestThatFit,
  processIdHeader,
  type ProcessServiceOptions,
} from "./process-service.js";
export { createAgentSandboxRest, type AgentSandboxRest, type AgentSandboxRestOptions, type RestMount } from "./rest.js";
export { defaultMetadataPrefix, metadataEnvironment, type MetadataEnvironmentOptions } from "./metadata.js";
