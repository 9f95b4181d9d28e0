package io.peerload.plugin;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.List;

/**
 * Registers a model archive through TorchServe's frontend. The plugin SDK cannot register models, so the frontend's
 * {@code org.pytorch.serve.util.ApiUtils.handleRegister} is called by reflection, which lets ONE jar work on
 * TorchServe 0.8 through 0.12:
 *
 * <ul>
 *   <li>0.8.1 - 0.11.1: {@code (url, modelName, runtime, handler, batchSize, maxBatchDelay, responseTimeout,
 *       initialWorkers, isSync, isWorkflowModel, s3SseKms)} (11 parameters)
 *   <li>0.12.0: the same with {@code startupTimeout} after {@code responseTimeout} (12 parameters)
 * </ul>
 *
 * The signature is chosen once, when the plugin is loaded; if none matches, {@link #load} fails with a message
 * naming what was found, the plugin logs it as an error at start and answers every request with it (500).
 */
public final class Registrar {
  public static final String API_UTILS = "org.pytorch.serve.util.ApiUtils";

  /** Parameters of one registration. */
  public static final class Request {
    public String url;
    public String modelName;
    public String runtime;
    public String handler;
    public int batchSize = 1;
    public int maxBatchDelay = 100;
    public int responseTimeout = -1;
    public int startupTimeout = -1;
    public int initialWorkers;
    public boolean synchronous = true;
  }

  /** TorchServe's answer: its HTTP status and message. */
  public static final class Result {
    public final int status;
    public final String message;

    Result(int status, String message) {
      this.status = status;
      this.message = message;
    }
  }

  /** TorchServe's default response and startup time-out (seconds) when ConfigManager cannot be asked. */
  static final int DEFAULT_TIMEOUT_SECONDS = 120;

  private final Method handleRegister;
  private final Method runtimeFromValue;
  private final boolean withStartupTimeout;

  private Registrar(Method handleRegister, Method runtimeFromValue, boolean withStartupTimeout) {
    this.handleRegister = handleRegister;
    this.runtimeFromValue = runtimeFromValue;
    this.withStartupTimeout = withStartupTimeout;
  }

  /**
   * A default of the server's ConfigManager ({@code getDefaultResponseTimeout}, {@code getDefaultStartupTimeout}).
   * TorchServe's own REST handler replaces -1 by these before calling handleRegister (a worker given -1 is killed
   * at once for "not responding in given time"), so the plugin must do the same.
   */
  private int serverDefault(String getter) {
    try {
      Class<?> cm = Class.forName(
          "org.pytorch.serve.util.ConfigManager", true, handleRegister.getDeclaringClass().getClassLoader());
      Object instance = cm.getMethod("getInstance").invoke(null);
      Object v = cm.getMethod(getter).invoke(instance);
      if (v instanceof Integer && (Integer) v > 0) {
        return (Integer) v;
      }
    } catch (ReflectiveOperationException | LinkageError | RuntimeException e) {
      // older server or test double: TorchServe's documented default
    }
    return DEFAULT_TIMEOUT_SECONDS;
  }

  /** Number of parameters of the chosen signature (11 or 12). */
  public int arity() {
    return handleRegister.getParameterCount();
  }

  /** Finds {@code ApiUtils} in the model server's class loader. */
  public static Registrar load(ClassLoader loader) throws ReflectiveOperationException {
    Class<?> apiUtils;
    try {
      apiUtils = Class.forName(API_UTILS, true, loader);
    } catch (ClassNotFoundException e) {
      throw new ClassNotFoundException(
          API_UTILS + " is not on the class path: the plugin must run inside TorchServe's frontend (0.8 - 0.12)", e);
    }
    return forClass(apiUtils);
  }

  /** Chooses the 12- or 11-parameter {@code handleRegister} of {@code apiUtils}. */
  public static Registrar forClass(Class<?> apiUtils) throws NoSuchMethodException {
    List<String> seen = new ArrayList<>();
    Method eleven = null;
    Method twelve = null;
    for (Method m : apiUtils.getMethods()) {
      if (!m.getName().equals("handleRegister") || !Modifier.isStatic(m.getModifiers())) {
        continue;
      }
      seen.add(signature(m));
      Class<?>[] p = m.getParameterTypes();
      if (matches(p, 12)) {
        twelve = m;
      } else if (matches(p, 11)) {
        eleven = m;
      }
    }
    Method chosen = twelve != null ? twelve : eleven;
    if (chosen == null) {
      throw new NoSuchMethodException(
          "no supported " + apiUtils.getName() + ".handleRegister signature (expected the 11-parameter form of "
              + "TorchServe 0.8-0.11 or the 12-parameter form of 0.12); found: " + (seen.isEmpty() ? "none" : seen));
    }
    Method fromValue;
    try {
      fromValue = chosen.getParameterTypes()[2].getMethod("fromValue", String.class);
    } catch (NoSuchMethodException e) {
      throw new NoSuchMethodException(chosen.getParameterTypes()[2].getName() + ".fromValue(String) not found");
    }
    return new Registrar(chosen, fromValue, chosen == twelve);
  }

  private static boolean matches(Class<?>[] p, int n) {
    if (p.length != n) {
      return false;
    }
    // (String url, String modelName, RuntimeType runtime, String handler, int..., boolean...)
    if (p[0] != String.class || p[1] != String.class || !p[2].isEnum() || p[3] != String.class) {
      return false;
    }
    int ints = n == 12 ? 5 : 4; // batchSize, maxBatchDelay, responseTimeout, [startupTimeout,] initialWorkers
    for (int i = 4; i < 4 + ints; i++) {
      if (p[i] != int.class) {
        return false;
      }
    }
    for (int i = 4 + ints; i < n; i++) {
      if (p[i] != boolean.class) {
        return false;
      }
    }
    return true;
  }

  private static String signature(Method m) {
    StringBuilder s = new StringBuilder("(");
    for (Class<?> c : m.getParameterTypes()) {
      if (s.length() > 1) {
        s.append(", ");
      }
      s.append(c.getSimpleName());
    }
    return s.append(")").toString();
  }

  /** Registers; TorchServe's exceptions become the HTTP status TorchServe itself would answer. */
  public Result register(Request r) throws PluginException {
    Object runtime = null;
    if (r.runtime != null) {
      try {
        runtime = runtimeFromValue.invoke(null, r.runtime);
      } catch (InvocationTargetException e) {
        throw PluginException.badRequest("invalid runtime \"" + r.runtime + "\"");
      } catch (IllegalAccessException e) {
        throw PluginException.internal("cannot call " + runtimeFromValue, e);
      }
    }
    int responseTimeout = r.responseTimeout > 0 ? r.responseTimeout : serverDefault("getDefaultResponseTimeout");
    int startupTimeout = r.startupTimeout > 0 ? r.startupTimeout : serverDefault("getDefaultStartupTimeout");
    Object[] args =
        withStartupTimeout
            ? new Object[] {
              r.url, r.modelName, runtime, r.handler, r.batchSize, r.maxBatchDelay, responseTimeout,
              startupTimeout, r.initialWorkers, r.synchronous, false, false
            }
            : new Object[] {
              r.url, r.modelName, runtime, r.handler, r.batchSize, r.maxBatchDelay, responseTimeout,
              r.initialWorkers, r.synchronous, false, false
            };
    Object response;
    try {
      response = handleRegister.invoke(null, args);
    } catch (InvocationTargetException e) {
      Throwable cause = e.getCause() == null ? e : e.getCause();
      throw new PluginException(statusOf(cause), messageOf(cause), null, cause);
    } catch (IllegalAccessException e) {
      throw PluginException.internal("cannot call " + handleRegister, e);
    }
    if (response == null) {
      throw PluginException.internal("TorchServe returned no registration status", null);
    }
    try {
      int code = (Integer) response.getClass().getMethod("getHttpResponseCode").invoke(response);
      String status = (String) response.getClass().getMethod("getStatus").invoke(response);
      return new Result(code, status);
    } catch (ReflectiveOperationException | ClassCastException e) {
      throw PluginException.internal("unexpected registration status object " + response.getClass().getName(), e);
    }
  }

  /** The status TorchServe's management handler gives each of its exceptions (matched by class name). */
  static int statusOf(Throwable t) {
    for (Class<?> c = t.getClass(); c != null; c = c.getSuperclass()) {
      switch (c.getSimpleName()) {
        case "ConflictStatusException":
          return 409;
        case "ModelNotFoundException":
        case "ModelVersionNotFoundException":
          return 404;
        case "BadRequestException":
        case "InvalidModelException":
        case "DownloadArchiveException":
        case "ModelException":
        case "InvalidKeyException":
        case "IllegalArgumentException":
          return 400;
        default:
          break;
      }
    }
    return 500;
  }

  private static String messageOf(Throwable t) {
    String m = t.getMessage();
    if (m == null || m.isEmpty()) {
      return t.getClass().getSimpleName();
    }
    return m;
  }
}
