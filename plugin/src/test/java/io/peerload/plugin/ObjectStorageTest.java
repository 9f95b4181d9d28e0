package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.InputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.PrivateKey;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** URL layout, default filters and signers: shared vectors plus the providers' published examples. */
class ObjectStorageTest {
  static final String AWS_AK = "AKIAIOSFODNN7EXAMPLE";
  static final String AWS_SK = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  static final String OSS_ID = "44CF9590006BF252F707";
  static final String OSS_SECRET = "OtxrzxIsfpFjA7SwPzILwy8Bw21TLhquhboDYROV";

  static String resource(String name) throws Exception {
    try (InputStream in = ObjectStorageTest.class.getResourceAsStream("/" + name)) {
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
  }

  static PrivateKey conformanceKey() throws Exception {
    JsonObject sa = JsonParser.parseString(resource("gcs-conformance-service-account.json")).getAsJsonObject();
    return GcsStorage.parsePrivateKey(sa.get("private_key").getAsString());
  }

  // ---- Published examples -------------------------------------------------------------------------------

  /** AWS "Authenticating Requests: Using Query Parameters (SigV4)" example (sigv4-query-string-auth.html). */
  @Test
  void awsDocumentationPresignedUrl() {
    S3Storage s3 = new S3Storage("examplebucket", "us-east-1", AWS_AK, AWS_SK, null, "https://s3.amazonaws.com", false);
    String url = s3.signedUrl("test.txt", Instant.parse("2013-05-24T00:00:00Z"), Duration.ofSeconds(86400));
    assertEquals(
        "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            + "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
            + "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
            + "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        url);
  }

  /** OSS "Include a V1 signature in a URL": Expires=1141889120, /quotes/nelson. */
  @Test
  void ossDocumentationUrlSignature() {
    OssStorage oss = new OssStorage("quotes", "oss-cn-hangzhou.aliyuncs.com", OSS_ID, OSS_SECRET);
    String url = oss.signedUrl("nelson", Instant.ofEpochSecond(1141889060), Duration.ofSeconds(60));
    assertEquals(
        "https://quotes.oss-cn-hangzhou.aliyuncs.com/nelson?OSSAccessKeyId=44CF9590006BF252F707"
            + "&Expires=1141889120&Signature=vjbyPxybdZaNmGa%2ByT272YEAiv4%3D",
        url);
    // The sample code of the Chinese edition of the same page (/oss-example/oss-api.pdf).
    assertEquals("EwaNTn1erJGkimiJ9WmXgwnANLc=",
        OssStorage.sign(OSS_SECRET, "GET\n\n\n1141889120\n/oss-example/oss-api.pdf"));
  }

  /** OSS "Include a signature in the Authorization header" example: the same HMAC-SHA1 core. */
  @Test
  void ossDocumentationHeaderSignatureCore() {
    String stringToSign = "PUT\nODBGOERFMDMzQTczRUY3NUE3NzA5QzdFNUYzMDQxNEM=\ntext/html\n"
        + "Thu, 17 Nov 2005 18:49:58 GMT\nx-oss-magic:abracadabra\nx-oss-meta-author:foo@bar.com\n/oss-example/nelson";
    assertEquals("26NBxoKdsyly4EDv6inkoDft/yA=", OssStorage.sign(OSS_SECRET, stringToSign));
  }

  /** googleapis/conformance-tests storage/v1/v4_signatures.json, the GET cases without extra headers. */
  @Test
  void gcsConformanceVectors() throws Exception {
    PrivateKey key = conformanceKey();
    String email = "test-iam-credentials@dummy-project-id.iam.gserviceaccount.com";
    String credPrefix = "X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=test-iam-credentials%40dummy-project-id.iam.gserviceaccount.com%2F";
    GcsStorage g = new GcsStorage("test-bucket", "dummy-project-id", email, key, null);
    assertEquals(
        "https://storage.googleapis.com/test-bucket/test-object?" + credPrefix
            + "20190201%2Fauto%2Fstorage%2Fgoog4_request&X-Goog-Date=20190201T090000Z&X-Goog-Expires=10"
            + "&X-Goog-SignedHeaders=host&X-Goog-Signature=95e6a13d43a1d1962e667f17397f2b80ac9bdd1669210d5e08e0135df9dff4e56113485dbe429ca2266487b9d1796ebdee2d7cf682a6ef3bb9fbb4c351686fba90d7b621cf1c4eb1fdf126460dd25fa0837dfdde0a9fd98662ce60844c458448fb2b352c203d9969cb74efa4bdb742287744a4f2308afa4af0e0773f55e32e92973619249214b97283b2daa14195244444e33f938138d1e5f561088ce8011f4986dda33a556412594db7c12fc40e1ff3f1bedeb7a42f5bcda0b9567f17f65855f65071fabb88ea12371877f3f77f10e1466fff6ff6973b74a933322ff0949ce357e20abe96c3dd5cfab42c9c83e740a4d32b9e11e146f0eb3404d2e975896f74",
        g.signedUrl("test-object", Instant.parse("2019-02-01T09:00:00Z"), Duration.ofSeconds(10)));
    assertEquals(
        "https://storage.googleapis.com/test-bucket/test-object?" + credPrefix
            + "20190301%2Fauto%2Fstorage%2Fgoog4_request&X-Goog-Date=20190301T090000Z&X-Goog-Expires=20"
            + "&X-Goog-SignedHeaders=host&X-Goog-Signature=9669ed5b10664dc594c758296580662912cf4bcc5a4ba0b6bf055bcbf6f34eed7bdad664f534962174a924741a0c273a4f67bc1847cef20192a6beab44223bd9d4fbbd749c407b79997598c30f82ddc269ff47ec09fa3afe74e00616d438df0d96a7d8ad0adacfad1dc3286f864d924fe919fb0dce45d3d975c5afe8e13af2db9cc37ba77835f92f7669b61e94c6d562196c1274529e76cfff1564cc2cad7d5387dc8e12f7a5dfd925685fe92c30b43709eee29fa2f66067472cee5423d1a3a4182fe8cea75c9329d181dc6acad7c393cd04f8bf5bc0515127d8ebd65d80c08e19ad03316053ea60033fd1b1fd85a69c576415da3bf0a3718d9ea6d03e0d66f0",
        g.signedUrl("test-object", Instant.parse("2019-03-01T09:00:00Z"), Duration.ofSeconds(20)));
    GcsStorage g2 = new GcsStorage("test-bucket2", "dummy-project-id", email, key, null);
    assertEquals(
        "https://storage.googleapis.com/test-bucket2/test-object2?" + credPrefix
            + "20190201%2Fauto%2Fstorage%2Fgoog4_request&X-Goog-Date=20190201T090000Z&X-Goog-Expires=10"
            + "&X-Goog-SignedHeaders=host&X-Goog-Signature=36e3d58dfd3ec1d2dd2f24b5ee372a71e811ffaa2162a2b871d26728d0354270bc116face87127532969c4a3967ed05b7309af741e19c7202f3167aa8c2ac420b61417d6451442bb91d7c822cd17be8783f01e05372769c88913561d27e6660dd8259f0081a71f831be6c50283626cbf04494ac10c394b29bb3bce74ab91548f58a37118a452693cf0483d77561fc9cac8f1765d2c724994cca46a83517a10157ee0347a233a2aaeae6e6ab5e204ff8fc5f54f90a3efdb8301d9fff5475d58cd05b181affd657f48203f4fb133c3a3d355b8eefbd10d5a0a5fd70d06e9515460ad74e22334b2cba4b29cae4f6f285cdb92d8f3126d7a1479ca3bdb69c207d860",
        g2.signedUrl("test-object2", Instant.parse("2019-02-01T09:00:00Z"), Duration.ofSeconds(10)));
  }

  // ---- URL layout ----------------------------------------------------------------------------------------

  @Test
  void urlLayoutOfAllFourKinds() throws Exception {
    String key = "team a/résnet (v2)+x.mar";
    String enc = "team%20a/r%C3%A9snet%20%28v2%29%2Bx.mar";
    assertEquals("https://b.s3.us-east-1.amazonaws.com/" + enc,
        new S3Storage("b", null, "a", "s", null, null, false).objectUrl(key));
    assertEquals("https://b.s3.eu-west-1.amazonaws.com/" + enc,
        new S3Storage("b", "eu-west-1", "a", "s", null, null, false).objectUrl(key));
    assertEquals("http://127.0.0.1:9000/b/" + enc,
        new S3Storage("b", null, "a", "s", null, "http://127.0.0.1:9000/", true).objectUrl(key));
    assertEquals("https://b.minio.local:8443/" + enc,
        new S3Storage("b", null, "a", "s", null, "https://minio.local:8443", false).objectUrl(key));
    assertEquals("https://b.oss-cn-hangzhou.aliyuncs.com/" + enc,
        new OssStorage("b", "https://oss-cn-hangzhou.aliyuncs.com", "i", "s").objectUrl(key));
    assertEquals("https://storage.googleapis.com/b/" + enc,
        new GcsStorage("b", "p", "e", conformanceKey(), null).objectUrl(key));
    String k64 = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
    assertEquals("https://acct.blob.core.windows.net/c/" + enc, new AbsStorage("acct", k64, "c", null).objectUrl(key));
    assertEquals("http://127.0.0.1:10000/acct/c/" + enc,
        new AbsStorage("acct", k64, "c", "http://127.0.0.1:10000").objectUrl(key));
    assertEquals("https://acct.blob.core.windows.net/c/" + enc,
        new AbsStorage("acct", k64, "c", "https://acct.blob.core.windows.net/").objectUrl(key));
  }

  @Test
  void keyEncodingIsRfc3986WithSlashKept() {
    assertEquals("a/b/c.mar", Encoding.encodeKey("a/b/c.mar"));
    assertEquals("odd/%21%27%28%29%2A%26%3D%2B%3F%23%25%3B%2C%3A%40%24%20~_.-.bin",
        Encoding.encodeKey("odd/!'()*&=+?#%;,:@$ ~_.-.bin"));
    assertEquals("%E4%B8%AD", Encoding.encodeKey("中"));
    assertEquals("a%2Fb", Encoding.encodeQuery("a/b"));
  }

  @Test
  void defaultFilters() throws Exception {
    assertEquals(Arrays.asList("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
        "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"),
        new S3Storage("b", null, "a", "s", null, null, false).defaultFilter());
    assertEquals(Arrays.asList("OSSAccessKeyId", "Expires", "Signature"),
        new OssStorage("b", "e.com", "i", "s").defaultFilter());
    assertEquals(Arrays.asList("X-Goog-Algorithm", "X-Goog-Credential", "X-Goog-Date", "X-Goog-Expires",
        "X-Goog-SignedHeaders", "X-Goog-Signature"),
        new GcsStorage("b", "p", "e", conformanceKey(), null).defaultFilter());
    List<String> abs = new AbsStorage("acct", "AAAA", "c", null).defaultFilter();
    assertTrue(abs.containsAll(Arrays.asList("sv", "ss", "srt", "sp", "se", "st", "spr", "sip", "si", "sr", "sig",
        "skoid", "sktid", "skt", "ske", "sks", "skv", "sdd")));
  }

  /** A signed URL with its signature parameters filtered has the unsigned URL's task id (every kind). */
  @Test
  void signedUrlCanonicalisesToTheObjectUrl() throws Exception {
    Instant now = Instant.parse("2026-01-15T08:00:00Z");
    List<ObjectStorage> kinds = Arrays.asList(
        new S3Storage("b", null, AWS_AK, AWS_SK, "token/+=", null, false),
        new OssStorage("b", "https://oss-cn-hangzhou.aliyuncs.com", OSS_ID, OSS_SECRET),
        new GcsStorage("b", "p", "e@x", conformanceKey(), null),
        new AbsStorage("acct", "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==", "c", null));
    for (ObjectStorage s : kinds) {
      String signed = s.signedUrl("m/x y.mar", now, Duration.ofHours(1));
      for (TaskId.Rule rule : TaskId.Rule.values()) {
        assertEquals(
            s.objectUrl("m/x y.mar"), TaskId.canonicalUrl(signed, s.defaultFilter(), rule), s.type() + " " + rule);
      }
    }
  }

  // ---- Shared vectors (test/vectors/object-storage.json, generated by the TypeScript side) ------------------

  static ObjectStorage fromVector(JsonObject loc, JsonObject creds) throws Exception {
    String type = loc.get("type").getAsString();
    switch (type) {
      case "s3":
        return new S3Storage(TaskIdTest.str(loc, "bucket"), TaskIdTest.str(loc, "region"),
            creds.get("access_key").getAsString(), creds.get("secret_key").getAsString(),
            TaskIdTest.str(creds, "session_token"), TaskIdTest.str(loc, "endpoint"),
            loc.has("pathStyle") && loc.get("pathStyle").getAsBoolean());
      case "oss":
        return new OssStorage(TaskIdTest.str(loc, "bucket"), TaskIdTest.str(loc, "endpoint"),
            creds.get("access_key_id").getAsString(), creds.get("access_key_secret").getAsString());
      case "gcs":
        {
          JsonObject sa = JsonParser.parseString(creds.get("service_account.json").getAsString()).getAsJsonObject();
          return new GcsStorage(TaskIdTest.str(loc, "bucket"), TaskIdTest.str(loc, "projectID"),
              sa.get("client_email").getAsString(), GcsStorage.parsePrivateKey(sa.get("private_key").getAsString()),
              TaskIdTest.str(loc, "endpoint"));
        }
      case "abs":
        return new AbsStorage(TaskIdTest.str(loc, "accountName"), creds.get("account_key").getAsString(),
            TaskIdTest.str(loc, "container"), TaskIdTest.str(loc, "endpoint"));
      default:
        throw new IllegalArgumentException(type);
    }
  }

  static List<List<String>> pairs(String url) {
    List<List<String>> out = new ArrayList<>();
    String q = URI.create(url).getRawQuery();
    for (String p : q.split("&")) {
      int eq = p.indexOf('=');
      out.add(Arrays.asList(percentDecode(p.substring(0, eq)), percentDecode(p.substring(eq + 1))));
    }
    out.sort((a, b) -> (a.get(0) + "=" + a.get(1)).compareTo(b.get(0) + "=" + b.get(1)));
    return out;
  }

  static String percentDecode(String s) {
    return java.net.URLDecoder.decode(s.replace("+", "%2B"), StandardCharsets.UTF_8);
  }

  @TestFactory
  Stream<DynamicTest> sharedObjectStorageVectors() throws Exception {
    JsonObject doc = Vectors.load("object-storage.json");
    JsonObject credentialSets = doc.getAsJsonObject("credentialSets");
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonElement e : doc.getAsJsonArray("cases")) {
      JsonObject c = e.getAsJsonObject();
      tests.add(DynamicTest.dynamicTest(c.get("name").getAsString(), () -> {
        JsonObject loc = c.getAsJsonObject("location");
        ObjectStorage s = fromVector(loc, credentialSets.getAsJsonObject(c.get("credentials").getAsString()));
        String key = c.get("key").getAsString();
        assertEquals(c.get("objectURL").getAsString(), s.objectUrl(key), "object URL");

        List<String> filter = loc.has("filteredQueryParams")
            ? TaskIdTest.strings(loc.get("filteredQueryParams")) : s.defaultFilter();
        assertEquals(TaskIdTest.strings(c.get("filter")), filter, "filter");
        // The generator (scripts/gen-storage-vectors.ts) computes the 1.5.3+ rule.
        TaskId.Rule r = TaskId.Rule.V1_5_3;
        assertEquals(c.get("canonicalURL").getAsString(), TaskId.canonicalUrl(s.objectUrl(key), filter, r));
        for (JsonElement t : c.getAsJsonArray("taskIDs")) {
          JsonObject id = t.getAsJsonObject();
          assertEquals(id.get("taskID").getAsString(), TaskId.compute(s.objectUrl(key), filter,
              TaskIdTest.str(id, "tag"), TaskIdTest.str(id, "application"), null, TaskIdTest.num(id, "pieceLength"), r));
        }

        String signed = s.signedUrl(key, Instant.parse(c.get("now").getAsString()),
            Duration.ofSeconds(c.get("expiresSeconds").getAsLong()));
        // Same query pairs (any order) for every kind; abs is pinned to the same SAS version and order.
        List<List<String>> expected = new ArrayList<>();
        for (JsonElement p : c.getAsJsonArray("signedQuery")) {
          JsonArray a = p.getAsJsonArray();
          expected.add(Arrays.asList(a.get(0).getAsString(), a.get(1).getAsString()));
        }
        expected.sort((a, b) -> (a.get(0) + "=" + a.get(1)).compareTo(b.get(0) + "=" + b.get(1)));
        assertEquals(expected, pairs(signed), "signed query");
        assertEquals(c.get("signedCanonicalURL").getAsString(), TaskId.canonicalUrl(signed, filter, r));
        assertEquals(c.get("signedTaskID").getAsString(),
            TaskId.compute(signed, filter, null, null, null, null, r), "task id of the signed URL");
        String unsignedTaskId = c.getAsJsonArray("taskIDs").get(0).getAsJsonObject().get("taskID").getAsString();
        assertEquals(c.get("signedTaskIDEqualsUnsigned").getAsBoolean(),
            unsignedTaskId.equals(TaskId.compute(signed, filter, null, null, null, null, r)),
            "signed and bare object URL share a task id");
      }));
    }
    return tests.stream();
  }

  @Test
  void emptyFilterLeavesTheUrlAloneFrom153() {
    assertEquals("https://x/y?b=~&a=2",
        TaskId.canonicalUrl("https://x/y?b=~&a=2", Collections.emptyList(), TaskId.Rule.V1_5_3));
    // Client 1.4 parses and re-serialises the query even without a filter.
    assertEquals("https://x/y?b=%7E&a=2",
        TaskId.canonicalUrl("https://x/y?b=~&a=2", Collections.emptyList(), TaskId.Rule.V1_4));
  }
}
