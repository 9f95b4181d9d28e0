package io.peerload.plugin;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * The peer daemon's task identity (dragonflyoss/client, dragonfly-client-util id_generator): {@code
 * hex(sha256(canonical_url + tag? + application? + revision? + piece_length? + "STANDARD"))}. The same algorithm as
 * {@code src/storage/taskid.ts}; both are checked on {@code test/vectors/taskid.json}. The plugin logs the id it
 * expects next to the one the proxy reports, so a preheat that was not hit is easy to explain.
 */
public final class TaskId {
  private TaskId() {}

  /** Task id of a URL; optional parts may be null. */
  public static String compute(
      String url, Collection<String> filter, String tag, String application, String revision, Long pieceLength) {
    StringBuilder s = new StringBuilder(canonicalUrl(url, filter));
    if (tag != null && !tag.isEmpty()) {
      s.append(tag);
    }
    if (application != null && !application.isEmpty()) {
      s.append(application);
    }
    if (revision != null && !revision.isEmpty()) {
      s.append(revision);
    }
    if (pieceLength != null) {
      s.append(pieceLength.longValue());
    }
    s.append("STANDARD");
    return Crypto.sha256Hex(s.toString());
  }

  /**
   * The URL with the filtered query parameters removed: unchanged when the filter is empty; otherwise the query is
   * split on {@code &}, segments holding {@code ;} dropped, pairs form-decoded, filtered, stably sorted by key and
   * re-encoded like Go's {@code url.QueryEscape}; a root path loses its slash; the fragment is kept.
   */
  public static String canonicalUrl(String url, Collection<String> filter) {
    if (filter == null || filter.isEmpty()) {
      return url;
    }
    // Split by hand: java.net.URI rejects characters (spaces, say) the daemon's lenient WHATWG parser accepts.
    String rest = url;
    String fragment = null;
    int hash = rest.indexOf('#');
    if (hash >= 0) {
      fragment = rest.substring(hash + 1);
      rest = rest.substring(0, hash);
    }
    String rawQuery = null;
    int q = rest.indexOf('?');
    if (q >= 0) {
      rawQuery = rest.substring(q + 1);
      rest = rest.substring(0, q);
    }
    int schemeEnd = rest.indexOf("://");
    if (schemeEnd < 0) {
      return url; // not an absolute URL: the daemon could not parse it either
    }
    String scheme = rest.substring(0, schemeEnd).toLowerCase(Locale.ROOT);
    int pathStart = rest.indexOf('/', schemeEnd + 3);
    String authority = pathStart < 0 ? rest.substring(schemeEnd + 3) : rest.substring(schemeEnd + 3, pathStart);
    String path = pathStart < 0 ? "" : rest.substring(pathStart);
    Set<String> drop = new HashSet<>(filter);
    List<String[]> pairs = new ArrayList<>();
    if (rawQuery != null) {
      for (String segment : rawQuery.split("&", -1)) {
        if (segment.isEmpty() || segment.indexOf(';') >= 0) {
          continue;
        }
        int eq = segment.indexOf('=');
        String k = Encoding.formDecode(eq < 0 ? segment : segment.substring(0, eq));
        String v = eq < 0 ? "" : Encoding.formDecode(segment.substring(eq + 1));
        if (!drop.contains(k)) {
          pairs.add(new String[] {k, v});
        }
      }
    }
    pairs.sort(Comparator.comparing((String[] p) -> p[0])); // List.sort is stable
    StringBuilder out = new StringBuilder();
    out.append(scheme).append("://").append(authority.toLowerCase(Locale.ROOT));
    if (!path.equals("/")) {
      out.append(path);
    }
    if (!pairs.isEmpty()) {
      out.append('?');
      for (int i = 0; i < pairs.size(); i++) {
        if (i > 0) {
          out.append('&');
        }
        out.append(Encoding.formEncode(pairs.get(i)[0])).append('=').append(Encoding.formEncode(pairs.get(i)[1]));
      }
    }
    if (fragment != null) {
      out.append('#').append(fragment);
    }
    return out.toString();
  }
}
