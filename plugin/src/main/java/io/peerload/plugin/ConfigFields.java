package io.peerload.plugin;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.Set;

/**
 * Reading the configuration file's fields: every error names the field and its file; a value is never echoed (the
 * file holds credentials).
 */
final class ConfigFields {
  private ConfigFields() {}

  static String string(JsonObject o, String field, String source) throws ConfigException {
    return primitiveString(o.get(field), field, source);
  }

  /** A JSON string or boolean, as a string (seed 2.2 writes {@code path_style} either way). */
  static String primitiveString(JsonElement e, String field, String source) throws ConfigException {
    if (e == null || !e.isJsonPrimitive()) {
      throw new ConfigException(source + ": field \"" + field + "\" must be a string");
    }
    JsonPrimitive p = e.getAsJsonPrimitive();
    if (!p.isString() && !p.isBoolean()) {
      throw new ConfigException(source + ": field \"" + field + "\" must be a string");
    }
    return p.getAsString();
  }

  static boolean hasControl(String s) {
    for (int i = 0; i < s.length(); i++) {
      if (Character.isISOControl(s.charAt(i))) {
        return true;
      }
    }
    return false;
  }

  /** An unmodifiable set in the given order (the order of the names in messages). */
  static Set<String> setOf(String... items) {
    return Collections.unmodifiableSet(new LinkedHashSet<>(Arrays.asList(items)));
  }
}
