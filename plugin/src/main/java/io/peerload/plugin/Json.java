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
   * The body of every answer: {@code {"Status": message}} (seed 2.4) plus {@code TaskID}, {@code LocalHit} and
   * {@code ErrorType} when known, and {@code CacheHit: true} on a local hit. {@code CacheHit} is never false: the
   * daemon says nothing that tells a hit on another peer's cache from a download from the origin.
   */
  public static String status(String message, String taskId, Boolean localHit, String errorType) {
    return status(message, taskId, localHit, errorType, null);
  }

  /**
   * With {@code HardLink} when the configuration asks for hard links ({@code hard_link_dir}): true when the
   * archive is a hard link of the peer daemon's copy (nothing was copied), false when it was streamed instead.
   */
  public static String status(String message, String taskId, Boolean localHit, String errorType, Boolean hardLink) {
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("Status", message == null ? "" : message);
    if (taskId != null && !taskId.isEmpty()) {
      body.put("TaskID", taskId);
    }
    if (Boolean.TRUE.equals(localHit)) {
      body.put("CacheHit", Boolean.TRUE);
    }
    if (localHit != null) {
      body.put("LocalHit", localHit);
    }
    if (hardLink != null) {
      body.put("HardLink", hardLink);
    }
    if (errorType != null && !errorType.isEmpty()) {
      body.put("ErrorType", errorType);
    }
    return GSON.toJson(body);
  }

  public static String status(String message) {
    return status(message, null, null, null);
  }

  /** {@code type} of the answer to a POST for an archive that is being downloaded for an earlier request. */
  public static final String DOWNLOAD_IN_PROGRESS = "DownloadInProgress";

  /**
   * The 202 answer to a POST for an archive another request is downloading: {@code {"code": 202, "type":
   * "DownloadInProgress", "message": m, "Status": m}}. Nothing was started; asking again later answers with the
   * outcome (409 once the earlier request registered the model). The operator waits on it (docs/guide.md, "Model servers").
   */
  public static String inProgress(String message) {
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("code", 202);
    body.put("type", DOWNLOAD_IN_PROGRESS);
    body.put("message", message);
    body.put("Status", message);
    return GSON.toJson(body);
  }
}
