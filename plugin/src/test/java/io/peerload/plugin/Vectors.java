package io.peerload.plugin;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

/** The vectors shared with the TypeScript suite (test/vectors/ of the repository). */
final class Vectors {
  private Vectors() {}

  static Path dir() {
    String p = System.getProperty("peerload.vectors");
    return p != null ? Paths.get(p) : Paths.get("..", "test", "vectors");
  }

  static JsonObject load(String name) throws IOException {
    Path file = dir().resolve(name);
    return JsonParser.parseString(new String(Files.readAllBytes(file), StandardCharsets.UTF_8)).getAsJsonObject();
  }
}
