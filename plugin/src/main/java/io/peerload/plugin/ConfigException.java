package io.peerload.plugin;

/** The configuration file is missing or invalid. The message names the file and the field, never a value. */
public final class ConfigException extends Exception {
  private static final long serialVersionUID = 1L;

  public ConfigException(String message) {
    super(message);
  }

  public ConfigException(String message, Throwable cause) {
    super(message, cause);
  }
}
