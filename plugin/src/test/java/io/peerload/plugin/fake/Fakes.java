package io.peerload.plugin.fake;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Stand-ins for TorchServe frontend classes of different versions: same method shapes as
 * org.pytorch.serve.util.ApiUtils.handleRegister, same exception class names.
 */
public final class Fakes {
  private Fakes() {}

  /** Records calls. */
  public static final List<List<Object>> CALLS = new ArrayList<>();
  /** What the next call throws, if anything. */
  public static Exception nextError;

  public enum RuntimeType {
    PYTHON("python"),
    PYTHON3("python3"),
    LSP("lsp");

    private final String value;

    RuntimeType(String value) {
      this.value = value;
    }

    public static RuntimeType fromValue(String v) {
      for (RuntimeType t : values()) {
        if (t.value.equalsIgnoreCase(v)) {
          return t;
        }
      }
      throw new IllegalArgumentException("Invalid RuntimeType value: " + v);
    }
  }

  public static class StatusResponse {
    private final String status;
    private final int code;

    public StatusResponse(String status, int code) {
      this.status = status;
      this.code = code;
    }

    public int getHttpResponseCode() {
      return code;
    }

    public String getStatus() {
      return status;
    }
  }

  public static class ModelException extends Exception {
    private static final long serialVersionUID = 1L;

    public ModelException(String m) {
      super(m);
    }
  }

  public static class ModelNotFoundException extends ModelException {
    private static final long serialVersionUID = 1L;

    public ModelNotFoundException(String m) {
      super(m);
    }
  }

  public static class ConflictStatusException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    public ConflictStatusException(String m) {
      super(m);
    }
  }

  public static class WorkerInitializationException extends Exception {
    private static final long serialVersionUID = 1L;

    public WorkerInitializationException(String m) {
      super(m);
    }
  }

  static StatusResponse answer(Object... args) throws Exception {
    CALLS.add(Arrays.asList(args));
    if (nextError != null) {
      Exception e = nextError;
      nextError = null;
      throw e;
    }
    int workers = (Integer) args[args.length - 4];
    return new StatusResponse("Model \"" + args[1] + "\" Version: 1.0 registered with " + workers
        + " initial workers. Use scale workers API to add workers for the model.", 200);
  }

  /** TorchServe 0.8.1 - 0.11.1. */
  public static final class ApiUtils11 {
    public static StatusResponse handleRegister(String url, String modelName, RuntimeType runtime, String handler,
        int batchSize, int maxBatchDelay, int responseTimeout, int initialWorkers, boolean isSync,
        boolean isWorkflowModel, boolean s3SseKms) throws Exception {
      return answer(url, modelName, runtime, handler, batchSize, maxBatchDelay, responseTimeout, initialWorkers,
          isSync, isWorkflowModel, s3SseKms);
    }
  }

  /** TorchServe 0.12.0. */
  public static final class ApiUtils12 {
    public static StatusResponse handleRegister(String url, String modelName, RuntimeType runtime, String handler,
        int batchSize, int maxBatchDelay, int responseTimeout, int startupTimeout, int initialWorkers,
        boolean isSync, boolean isWorkflowModel, boolean s3SseKms) throws Exception {
      return answer(url, modelName, runtime, handler, batchSize, maxBatchDelay, responseTimeout, startupTimeout,
          initialWorkers, isSync, isWorkflowModel, s3SseKms);
    }

    /** An unrelated overload with the right name: must be ignored. */
    public static StatusResponse handleRegister(Object request) {
      return null;
    }
  }

  /** A future version we do not know. */
  public static final class ApiUtilsUnknown {
    public static StatusResponse handleRegister(String url, String modelName) {
      return null;
    }
  }
}
