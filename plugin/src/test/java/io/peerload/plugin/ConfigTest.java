package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class ConfigTest {
  static final String SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  static final String S3 =
      "{\"addr\":\"http://127.0.0.1:4001\",\"header\":{},\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"models\","
          + "\"region\":\"us-east-1\",\"access_key\":\"AKIAIOSFODNN7EXAMPLE\",\"secret_key\":\"" + SECRET + "\"}}";

  @TempDir Path dir;

  static PluginConfig parse(String json) throws ConfigException {
    return PluginConfig.parse(json, "config.json", Paths.get("."));
  }

  static String message(String json) {
    return assertThrows(ConfigException.class, () -> parse(json)).getMessage();
  }

  // ---- location ----------------------------------------------------------------------------------------

  @Test
  void locationFromEnvironmentWins() {
    Map<String, String> env = new HashMap<>();
    env.put("P2P_ENDPOINT_CONFIG", "/srv/p2p.json");
    assertEquals(Paths.get("/srv/p2p.json"), ConfigSource.resolvePath(env, "Linux", "/root"));
    assertEquals(Paths.get("/srv/p2p.json"), ConfigSource.resolvePath(env, "Mac OS X", "/Users/a"));
  }

  @Test
  void defaultLocationPerOs() {
    Map<String, String> env = Collections.emptyMap();
    assertEquals(Paths.get("/etc/p2p-endpoint/config.json"), ConfigSource.resolvePath(env, "Linux", "/root"));
    assertEquals(Paths.get("/Users/a/.p2p-endpoint/config.json"), ConfigSource.resolvePath(env, "Mac OS X", "/Users/a"));
    Map<String, String> blank = new HashMap<>();
    blank.put("P2P_ENDPOINT_CONFIG", "  ");
    assertEquals(Paths.get("/etc/p2p-endpoint/config.json"), ConfigSource.resolvePath(blank, "Linux", "/root"));
  }

  // ---- parsing and defaults ----------------------------------------------------------------------------

  @Test
  void s3WithDefaults() throws Exception {
    PluginConfig c = parse("{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}");
    assertEquals("http://127.0.0.1:4001", c.addr().toString());
    assertTrue(c.headers().isEmpty());
    assertFalse(c.filterConfigured());
    assertEquals(c.storage().defaultFilter(), c.filter());
    assertEquals("us-east-1", ((S3Storage) c.storage()).region());
  }

  @Test
  void daemonVersionSelectsTheTaskIdRule() throws Exception {
    String storage = "\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}";
    assertEquals(TaskId.Rule.V1_4, parse("{" + storage + "}").taskIdRule(), "default: the tested release");
    assertEquals(TaskId.Rule.V1_4, parse("{\"daemon_version\":\"1.4.2\"," + storage + "}").taskIdRule());
    assertEquals(TaskId.Rule.V1_5_3, parse("{\"daemon_version\":\"v1.5.3\"," + storage + "}").taskIdRule());
    assertEquals(TaskId.Rule.V1_5_3, parse("{\"daemon_version\":\"1.5.3+\"," + storage + "}").taskIdRule());
    assertTrue(parse("{\"daemon_version\":\"1.4\"," + storage + "}").toString().contains("daemon_version=1.4"));
    assertEquals("config.json: field \"daemon_version\" must be \"1.4\", \"1.5.3+\" or the peer daemon's "
        + "(dragonfly-client) version such as 1.4.2 or v1.5.3",
        message("{\"daemon_version\":\"latest\"," + storage + "}"));
  }

  @Test
  void useP2PIsTheChoiceOfThePluginNotTheConfig() {
    String m = message("{\"header\":{\"x-dragonfly-use-p2p\":\"false\"},\"object_storage\":{\"type\":\"s3\","
        + "\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}");
    assertTrue(m.contains("field \"header.x-dragonfly-use-p2p\": the plugin always sends X-Dragonfly-Use-P2P: true"), m);
  }

  @Test
  void explicitFilterAndHeaders() throws Exception {
    PluginConfig c = parse("{\"addr\":\"127.0.0.1:65001\",\"header\":{\"X-Dragonfly-Tag\":\"v1\"},"
        + "\"filter\":[\"Expires\",\"Signature\",\"Expires\"],"
        + "\"object_storage\":{\"type\":\"oss\",\"bucket_name\":\"m\",\"endpoint\":\"oss-cn-hangzhou.aliyuncs.com\","
        + "\"access_key_id\":\"i\",\"access_key_secret\":\"s\"}}");
    assertEquals("http://127.0.0.1:65001", c.addr().toString());
    assertEquals("v1", c.headers().get("X-Dragonfly-Tag"));
    assertEquals(Arrays.asList("Expires", "Signature"), c.filter());
    assertTrue(c.filterConfigured());
    assertEquals("https://m.oss-cn-hangzhou.aliyuncs.com/k", c.storage().objectUrl("k"));
  }

  @Test
  void emptyFilterMeansNoFiltering() throws Exception {
    PluginConfig c = parse("{\"filter\":[],\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}");
    assertTrue(c.filter().isEmpty());
    assertTrue(ProxyDownloader.filterHeaders(c.filter()).isEmpty());
  }

  @Test
  void allFourKinds(@TempDir Path tmp) throws Exception {
    assertInstanceOf(S3Storage.class, parse(S3).storage());
    assertInstanceOf(OssStorage.class, parse("{\"object_storage\":{\"type\":\"oss\",\"bucket_name\":\"m\","
        + "\"endpoint\":\"https://oss-cn-beijing.aliyuncs.com\",\"access_key_id\":\"i\",\"access_key_secret\":\"s\"}}").storage());
    Path sa = tmp.resolve("sa.json");
    Files.write(sa, ObjectStorageTest.resource("gcs-conformance-service-account.json").getBytes(StandardCharsets.UTF_8));
    PluginConfig gcs = PluginConfig.parse("{\"object_storage\":{\"type\":\"gcs\",\"bucket_name\":\"m\",\"project_id\":\"p\","
        + "\"service_account_path\":\"sa.json\"}}", "c.json", tmp);
    assertInstanceOf(GcsStorage.class, gcs.storage());
    assertEquals("https://storage.googleapis.com/m/k", gcs.storage().objectUrl("k"));
    PluginConfig abs = parse("{\"object_storage\":{\"type\":\"abs\",\"account_name\":\"devstoreaccount1\","
        + "\"account_key\":\"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==\","
        + "\"container_name\":\"models\",\"endpoint\":\"http://127.0.0.1:10000\"}}");
    assertEquals("http://127.0.0.1:10000/devstoreaccount1/models/k", abs.storage().objectUrl("k"));
  }

  @Test
  void s3EndpointAndPathStyle() throws Exception {
    PluginConfig c = parse("{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\","
        + "\"secret_key\":\"s\",\"endpoint\":\"http://127.0.0.1:9000/\",\"path_style\":true}}");
    assertEquals("http://127.0.0.1:9000/m/k", c.storage().objectUrl("k"));
    PluginConfig str = parse("{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\","
        + "\"secret_key\":\"s\",\"endpoint\":\"https://minio.local\",\"path_style\":\"false\"}}");
    assertEquals("https://m.minio.local/k", str.storage().objectUrl("k"));
  }

  // ---- validation: every error names its field ------------------------------------------------------------

  @ParameterizedTest(name = "{0}")
  @CsvSource(
      delimiter = '|',
      value = {
        "missing object_storage|{}|object_storage",
        "object_storage not an object|{\"object_storage\":3}|object_storage",
        "missing type|{\"object_storage\":{}}|object_storage.type",
        "unknown type|{\"object_storage\":{\"type\":\"obs\"}}|object_storage.type",
        "missing bucket|{\"object_storage\":{\"type\":\"s3\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|object_storage.bucket_name",
        "missing access_key|{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"secret_key\":\"s\"}}|object_storage.access_key",
        "empty secret_key|{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\" \"}}|object_storage.secret_key",
        "typo in a field|{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\",\"acess_key\":\"x\"}}|object_storage.acess_key",
        "oss field on s3|{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\",\"access_key_id\":\"x\"}}|object_storage.access_key_id",
        "oss without endpoint|{\"object_storage\":{\"type\":\"oss\",\"bucket_name\":\"m\",\"access_key_id\":\"i\",\"access_key_secret\":\"s\"}}|object_storage.endpoint",
        "gcs without service account|{\"object_storage\":{\"type\":\"gcs\",\"bucket_name\":\"m\",\"project_id\":\"p\"}}|object_storage.service_account_path",
        "gcs unreadable service account|{\"object_storage\":{\"type\":\"gcs\",\"bucket_name\":\"m\",\"project_id\":\"p\",\"service_account_path\":\"/nonexistent/sa.json\"}}|object_storage.service_account_path",
        "abs without container|{\"object_storage\":{\"type\":\"abs\",\"account_name\":\"acct\",\"account_key\":\"AAAA\"}}|object_storage.container_name",
        "abs key not base64|{\"object_storage\":{\"type\":\"abs\",\"account_name\":\"acct\",\"account_key\":\"not base64!\",\"container_name\":\"c\"}}|object_storage.account_key",
        "abs bad account|{\"object_storage\":{\"type\":\"abs\",\"account_name\":\"Bad_Name\",\"account_key\":\"AAAA\",\"container_name\":\"c\"}}|object_storage.account_name",
        "bucket with a slash|{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"a/b\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|object_storage.bucket_name",
        "s3 endpoint ftp|{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\",\"endpoint\":\"ftp://x\"}}|object_storage.endpoint",
        "path_style not boolean|{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\",\"endpoint\":\"http://x\",\"path_style\":\"yes\"}}|object_storage.path_style",
        "path_style without endpoint|{\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\",\"path_style\":true}}|object_storage.path_style",
        "addr https|{\"addr\":\"https://127.0.0.1:4001\",\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|addr",
        "addr with path|{\"addr\":\"http://127.0.0.1:4001/x\",\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|addr",
        "header not object|{\"header\":[],\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|header",
        "header value not string|{\"header\":{\"X-A\":{}},\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|header.X-A",
        "header reserved|{\"header\":{\"Host\":\"x\"},\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|header.Host",
        "header name invalid|{\"header\":{\"X A\":\"x\"},\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|header.X A",
        "header value CRLF|{\"header\":{\"X-A\":\"a\\r\\nX-B: b\"},\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|header.X-A",
        "filter not array|{\"filter\":\"Expires&Signature\",\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|filter",
        "filter item with &|{\"filter\":[\"Expires&Signature\"],\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|filter[0]",
        "filter item empty|{\"filter\":[\"a\",\"\"],\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|filter[1]",
        "unknown top-level field|{\"adr\":\"x\",\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"m\",\"access_key\":\"a\",\"secret_key\":\"s\"}}|adr",
      })
  void validationNamesTheField(String name, String json, String field) {
    String m = message(json);
    assertTrue(m.contains("\"" + field + "\""), () -> name + ": " + m);
    assertTrue(m.startsWith("config.json: "), m);
  }

  @Test
  void invalidJsonGivesPositionOnlyNeverContent() {
    String m = message("{\"object_storage\":{\"secret_key\":\"" + SECRET + "\" oops}}");
    assertTrue(m.contains("not valid JSON"), m);
    assertFalse(m.contains(SECRET), m);
    assertFalse(m.contains("oops"), m);
  }

  @Test
  void secretsNeverInErrorsOrSummary() throws Exception {
    String bad = S3.replace("\"region\":\"us-east-1\"", "\"region\":\"US EAST\"");
    assertFalse(message(bad).contains(SECRET));
    String withTypo = S3.replace("\"bucket_name\"", "\"bucket\"");
    assertFalse(message(withTypo).contains(SECRET));
    PluginConfig c = parse(S3.replace("\"header\":{}", "\"header\":{\"Authorization\":\"Bearer top-secret\"}"));
    assertFalse(c.toString().contains(SECRET), c.toString());
    assertFalse(c.toString().contains("AKIAIOSFODNN7EXAMPLE"), c.toString());
    assertFalse(c.toString().contains("top-secret"), c.toString());
  }

  // ---- reload ------------------------------------------------------------------------------------------------

  @Test
  void reReadWhenTheFileChangesWithoutRestart() throws Exception {
    Path file = dir.resolve("config.json");
    AtomicLong clock = new AtomicLong(1_000);
    ConfigSource src = new ConfigSource(file, clock::get);
    assertTrue(assertThrows(ConfigException.class, src::current).getMessage().contains("not found"));

    Files.write(file, S3.getBytes(StandardCharsets.UTF_8));
    PluginConfig first = src.current();
    assertSame(first, src.current(), "unchanged file: no re-parse");

    // Rotate keys the way a Kubernetes Secret volume does: write elsewhere, rename over.
    Path next = dir.resolve("next.json");
    Files.write(next, S3.replace("\"region\":\"us-east-1\"", "\"region\":\"eu-west-1\"").getBytes(StandardCharsets.UTF_8));
    Files.move(next, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    PluginConfig second = src.current();
    assertEquals("eu-west-1", ((S3Storage) second.storage()).region());

    // A broken edit is reported (naming the field) until fixed; it does not crash anything.
    Files.write(file, "{\"object_storage\":{\"type\":\"s3\"}}".getBytes(StandardCharsets.UTF_8));
    assertTrue(assertThrows(ConfigException.class, src::current).getMessage().contains("object_storage.bucket_name"));
    Files.write(file, S3.getBytes(StandardCharsets.UTF_8));
    assertEquals("us-east-1", ((S3Storage) src.current().storage()).region());

    // Referenced files (GCS service account) are picked up after the refresh interval even if config.json is same.
    PluginConfig cached = src.current();
    clock.addAndGet(ConfigSource.REFRESH_MILLIS);
    assertFalse(cached == src.current(), "re-parsed after the refresh interval");
  }
}
