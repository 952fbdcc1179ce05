export { createProcessService, droppedBytesTrailers, processIdHeader, type ProcessServiceOptions } from "./process-service.js";
