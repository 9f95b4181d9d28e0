package io.peerload.plugin;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Response bodies. Always produced by a JSON library (never by string formatting), so quotes, backslashes and
 * new lines in messages are escaped and every body parses.
 */
public final class Json {
  static final Gson GSON = new GsonBuilder().disableHtmlEscaping().serializeNulls().create();

  private Json() {}

  /**
   * The body of every answer: {@code {"Status": message}} (seed 2.4) plus {@code TaskID}, {@code CacheHit} and
   * {@code ErrorType} when known.
   */
  public static String status(String message, String taskId, Boolean cacheHit, String errorType) {
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("Status", message == null ? "" : message);
    if (taskId != null && !taskId.isEmpty()) {
      body.put("TaskID", taskId);
    }
    if (cacheHit != null) {
      body.put("CacheHit", cacheHit);
    }
    if (errorType != null && !errorType.isEmpty()) {
      body.put("ErrorType", errorType);
    }
    return GSON.toJson(body);
  }

  public static String status(String message) {
    return status(message, null, null, null);
  }
}
