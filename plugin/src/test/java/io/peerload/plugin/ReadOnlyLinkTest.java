package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.PosixFilePermissions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** When a hard link of the daemon's file is safe from the model server (see {@link ReadOnlyLink}). */
class ReadOnlyLinkTest {
  @TempDir Path dir;

  /** A non-root TorchServe (uid 1000, no capabilities), the daemon's file owned by root. */
  static final ReadOnlyLink.Identity NON_ROOT = new ReadOnlyLink.Identity(1000, 0, null);

  static final String STATUS = "Name:\tjava\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t1000\t1001\t1002\t1003\n"
      + "Gid:\t1000\t1000\t1000\t1000\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n"
      + "CapEff:\t00000000a80425fb\nCapBnd:\t00000000a80425fb\n";

  @Test
  void theIdentityIsTheFileSystemUidAndTheEffectiveCapabilities() {
    ReadOnlyLink.Identity id = ReadOnlyLink.Identity.parse(STATUS);
    assertNull(id.unknown);
    assertEquals(1003, id.fsUid, "the fourth uid is the one file access uses");
    assertEquals(0xa80425fbL, id.capEff);
    assertNotNull(ReadOnlyLink.Identity.parse("Name:\tjava\n").unknown);
  }

  @Test
  void aNonRootServerThatIsNotTheOwnerAndCannotWriteIsSafe() {
    assertNull(ReadOnlyLink.problem(NON_ROOT, 0, "rw-r--r--", false));
  }

  @Test
  void rootOrTheCapabilitiesThatOverrideTheModeAreNot() {
    ReadOnlyLink.Identity root = ReadOnlyLink.Identity.parse(STATUS.replace("1000\t1001\t1002\t1003", "0\t0\t0\t0"));
    String p = ReadOnlyLink.problem(root, 0, "rw-r--r--", true);
    assertTrue(p.contains("CAP_DAC_OVERRIDE") && p.contains("CAP_FOWNER") && p.contains("CAP_CHOWN"), p);
    assertTrue(p.contains("non-root user other than the peer daemon's"), p);
    for (long cap : new long[] {ReadOnlyLink.CAP_DAC_OVERRIDE, ReadOnlyLink.CAP_FOWNER, ReadOnlyLink.CAP_CHOWN}) {
      assertNotNull(ReadOnlyLink.problem(new ReadOnlyLink.Identity(1000, cap, null), 0, "r--r--r--", false),
          "capability " + cap);
    }
  }

  @Test
  void theOwnerCouldMakeItWritableEvenWhenItIsReadOnlyNow() {
    String p = ReadOnlyLink.problem(NON_ROOT, 1000, "r--r--r--", false);
    assertTrue(p.contains("uid 1000, the owner of the peer daemon's file"), p);
  }

  @Test
  void aFileTheServerMayWriteByModeOrAclIsNot() {
    String p = ReadOnlyLink.problem(NON_ROOT, 0, "rw-rw-rw-", true);
    assertTrue(p.contains("rw-rw-rw-") && p.contains("umask"), p);
  }

  @Test
  void anUnknownIdentityGuaranteesNothing() {
    ReadOnlyLink.Identity unknown = new ReadOnlyLink.Identity(-1, -1, "cannot read /proc/self/status");
    assertTrue(ReadOnlyLink.problem(unknown, 0, "r--r--r--", false).contains("cannot tell"));
  }

  @Test
  void thisProcessIsJudgedFromItsOwnStatus() throws Exception {
    Path file = Files.write(dir.resolve("f"), new byte[1]);
    Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("r--r--r--"));
    String status = new String(Files.readAllBytes(Paths.get("/proc/self/status")), StandardCharsets.UTF_8);
    ReadOnlyLink.Identity me = ReadOnlyLink.Identity.parse(status);
    // This process created the file, so it owns it: never safe, whoever runs the build.
    String p = ReadOnlyLink.PROCESS.problem(file);
    assertNotNull(p);
    boolean overrides = (me.capEff & (ReadOnlyLink.CAP_DAC_OVERRIDE | ReadOnlyLink.CAP_FOWNER
        | ReadOnlyLink.CAP_CHOWN)) != 0;
    assertTrue(overrides ? p.contains("CAP_") : p.contains("the owner"), p);
  }
}
