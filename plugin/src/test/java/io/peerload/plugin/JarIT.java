package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import org.junit.jupiter.api.Test;

/** Checks the shaded jar itself (run by Failsafe after `package`). */
class JarIT {
  static JarFile jar() throws Exception {
    String path = System.getProperty("peerload.jar");
    assertNotNull(path, "peerload.jar system property");
    return new JarFile(path);
  }

  static int major(JarFile jar, JarEntry e) throws Exception {
    try (InputStream in = jar.getInputStream(e); DataInputStream d = new DataInputStream(in)) {
      assertEquals(0xCAFEBABE, d.readInt(), e.getName());
      d.readUnsignedShort(); // minor
      return d.readUnsignedShort();
    }
  }

  @Test
  void bytecodeIsJava11AndNothingNewer() throws Exception {
    try (JarFile jar = jar()) {
      int ours = 0;
      List<String> tooNew = new ArrayList<>();
      for (Enumeration<JarEntry> en = jar.entries(); en.hasMoreElements(); ) {
        JarEntry e = en.nextElement();
        if (!e.getName().endsWith(".class")) {
          continue;
        }
        int major = major(jar, e);
        if (major > 55) {
          tooNew.add(e.getName() + "=" + major);
        }
        if (e.getName().startsWith("io/peerload/plugin/") && !e.getName().startsWith("io/peerload/plugin/shaded/")) {
          assertEquals(55, major, e.getName());
          ours++;
        }
      }
      assertTrue(ours > 10, "plugin classes found: " + ours);
      assertEquals(new ArrayList<String>(), tooNew);
    }
  }

  @Test
  void selfContainedRelocatedAndRegistered() throws Exception {
    try (JarFile jar = jar()) {
      List<String> names = new ArrayList<>();
      jar.stream().forEach(e -> names.add(e.getName()));
      assertTrue(names.stream().anyMatch(n -> n.startsWith("io/peerload/plugin/shaded/gson/")), "gson relocated");
      for (String n : names) {
        assertFalse(n.startsWith("com/google/"), "unrelocated: " + n);
        assertFalse(n.startsWith("org/pytorch/"), "the SDK is provided by TorchServe: " + n);
        assertFalse(n.startsWith("org/slf4j/"), "slf4j is provided by TorchServe: " + n);
        assertFalse(n.endsWith("module-info.class"), n);
      }
      JarEntry svc = jar.getJarEntry("META-INF/services/org.pytorch.serve.servingsdk.ModelServerEndpoint");
      assertNotNull(svc);
      try (InputStream in = jar.getInputStream(svc)) {
        assertEquals("io.peerload.plugin.P2PEndpoint", new String(in.readAllBytes(), StandardCharsets.UTF_8).trim());
      }
      // The relocated classes reference only relocated Gson.
      JarEntry cfg = jar.getJarEntry("io/peerload/plugin/PluginConfig.class");
      try (InputStream in = jar.getInputStream(cfg)) {
        String bytes = new String(in.readAllBytes(), StandardCharsets.ISO_8859_1);
        assertTrue(bytes.contains("io/peerload/plugin/shaded/gson/JsonParser"));
        assertFalse(bytes.contains("com/google/gson"));
      }
    }
  }
}
