package io.peerload.plugin;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

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

  /**
   * The largest byte size accepted: 2^53 - 1 (8 PiB), so that {@code peerload check}, which reads the file in
   * JavaScript, holds every accepted value exactly.
   */
  static final long MAX_SIZE = (1L << 53) - 1;

  private static final Pattern SIZE = Pattern.compile("([0-9]+) ?([A-Za-z]*)");
  private static final Map<String, Long> SIZE_UNITS = new LinkedHashMap<>();

  static {
    SIZE_UNITS.put("", 1L);
    SIZE_UNITS.put("b", 1L);
    SIZE_UNITS.put("kb", 1000L);
    SIZE_UNITS.put("mb", 1000_000L);
    SIZE_UNITS.put("gb", 1000_000_000L);
    SIZE_UNITS.put("tb", 1000_000_000_000L);
    SIZE_UNITS.put("kib", 1L << 10);
    SIZE_UNITS.put("mib", 1L << 20);
    SIZE_UNITS.put("gib", 1L << 30);
    SIZE_UNITS.put("tib", 1L << 40);
  }

  private static final Pattern DURATION = Pattern.compile("(?:[0-9]+(?:ms|s|m|h))+");
  private static final Pattern DURATION_PART = Pattern.compile("([0-9]+)(ms|s|m|h)");

  /**
   * A byte size: a JSON integer, or a string of a whole number and a unit (B, KB, MB, GB, TB in powers of 1000;
   * KiB, MiB, GiB, TiB in powers of 1024; any case), such as {@code "256GiB"}; 1 to {@link #MAX_SIZE}. Whole
   * numbers only, so the plugin and {@code peerload check} compute the same value.
   */
  static long byteSize(JsonElement e, String field, String source) throws ConfigException {
    String hint = source + ": field \"" + field + "\" must be a number of bytes or a size such as \"256GiB\" "
        + "(a whole number and B, KB, MB, GB, TB, KiB, MiB, GiB or TiB), from 1 byte to 8 PiB";
    if (e == null || !e.isJsonPrimitive()) {
      throw new ConfigException(hint);
    }
    JsonPrimitive p = e.getAsJsonPrimitive();
    BigInteger value;
    if (p.isNumber()) {
      BigDecimal d;
      try {
        d = p.getAsBigDecimal().stripTrailingZeros();
      } catch (NumberFormatException ex) {
        throw new ConfigException(hint);
      }
      if (d.scale() > 0) {
        throw new ConfigException(hint);
      }
      value = d.toBigIntegerExact();
    } else if (p.isString()) {
      Matcher m = SIZE.matcher(p.getAsString().trim());
      Long unit = m.matches() ? SIZE_UNITS.get(m.group(2).toLowerCase(Locale.ROOT)) : null;
      if (unit == null) {
        throw new ConfigException(hint);
      }
      value = new BigInteger(m.group(1)).multiply(BigInteger.valueOf(unit));
    } else {
      throw new ConfigException(hint);
    }
    if (value.signum() <= 0 || value.compareTo(BigInteger.valueOf(MAX_SIZE)) > 0) {
      throw new ConfigException(hint);
    }
    return value.longValueExact();
  }

  /**
   * A duration as a string of whole numbers with units, Go style ({@code "1h"}, {@code "90m"}, {@code "1h30m"},
   * {@code "45s"}, {@code "500ms"}), between {@code min} and {@code max} milliseconds; the milliseconds.
   */
  static long durationMillis(JsonElement e, String field, String source, long min, long max)
      throws ConfigException {
    String hint = source + ": field \"" + field + "\" must be a duration such as \"1h\", \"90m\" or \"1h30m\" "
        + "(whole numbers with h, m, s or ms), from " + formatMillis(min) + " to " + formatMillis(max);
    if (e == null || !e.isJsonPrimitive() || !e.getAsJsonPrimitive().isString()) {
      throw new ConfigException(hint);
    }
    String s = e.getAsString().trim();
    if (!DURATION.matcher(s).matches()) {
      throw new ConfigException(hint);
    }
    BigInteger total = BigInteger.ZERO;
    Matcher m = DURATION_PART.matcher(s);
    while (m.find()) {
      long unit;
      switch (m.group(2)) {
        case "h":
          unit = 3_600_000L;
          break;
        case "m":
          unit = 60_000L;
          break;
        case "s":
          unit = 1_000L;
          break;
        default:
          unit = 1L;
      }
      total = total.add(new BigInteger(m.group(1)).multiply(BigInteger.valueOf(unit)));
    }
    if (total.compareTo(BigInteger.valueOf(min)) < 0 || total.compareTo(BigInteger.valueOf(max)) > 0) {
      throw new ConfigException(hint);
    }
    return total.longValueExact();
  }

  /** Milliseconds in the largest whole unit: 3600000 is "1h", 5400000 "90m", 1500 "1500ms". */
  static String formatMillis(long ms) {
    if (ms > 0 && ms % 3_600_000L == 0) {
      return ms / 3_600_000L + "h";
    }
    if (ms > 0 && ms % 60_000L == 0) {
      return ms / 60_000L + "m";
    }
    if (ms > 0 && ms % 1_000L == 0) {
      return ms / 1_000L + "s";
    }
    return ms + "ms";
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
