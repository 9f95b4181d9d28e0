package io.peerload.plugin;

import static io.peerload.plugin.ConfigFields.hasControl;

import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code hard_link_dir}: the model store's directory as the peer daemon sees it, sent in {@code
 * X-Dragonfly-Output-Path} ({@link DaemonHardLink}). {@code ${NAME}} is replaced from the model server's
 * environment: the per-pod part of a node volume's path (a pod name, say).
 */
final class HardLinkDir {
  private static final Pattern ENV_REF = Pattern.compile("\\$\\{([A-Za-z_][A-Za-z0-9_]*)\\}");

  private HardLinkDir() {}

  /**
   * Validates {@code hard_link_dir} and replaces its {@code ${NAME}}s. The daemon needs an absolute path (it
   * resolves nothing), and the path ends up in a request header, so no control characters.
   */
  static String parse(String raw, Map<String, String> env, String source) throws ConfigException {
    String field = source + ": field \"hard_link_dir\"";
    Matcher m = ENV_REF.matcher(raw);
    StringBuilder b = new StringBuilder();
    while (m.find()) {
      String value = env.get(m.group(1));
      if (value == null || value.isEmpty()) {
        throw new ConfigException(field + " uses ${" + m.group(1) + "}, which is not set in the model server's "
            + "environment: set it (e.g. from the pod's metadata.name) or write the path out");
      }
      m.appendReplacement(b, Matcher.quoteReplacement(value));
    }
    m.appendTail(b);
    String dir = b.toString();
    if (dir.contains("${")) {
      throw new ConfigException(field + ": only ${NAME} (letters, digits, '_') can be replaced from the environment");
    }
    if (!dir.startsWith("/")) {
      throw new ConfigException(field + " must be an absolute path: the model store's directory as the peer daemon "
          + "sees it (the same path when both pods mount the node volume at the same place)");
    }
    if (hasControl(dir)) {
      throw new ConfigException(field + " must not contain control characters");
    }
    for (String segment : dir.split("/")) {
      if (segment.equals(".") || segment.equals("..")) {
        throw new ConfigException(field + " must not contain '.' or '..' segments");
      }
    }
    return dir.length() > 1 && dir.endsWith("/") ? dir.substring(0, dir.length() - 1) : dir;
  }
}
